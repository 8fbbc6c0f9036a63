import Foundation

/// Checks a DPoP proof (RFC 9449 section 4.3): the one checker used by the server's token
/// endpoint, its resource endpoints, and ``AccessTokenVerifier`` for other services.
///
/// What it checks, in order: a compact JWS of at most 8 KiB with `typ` `dpop+jwt`; an `alg` of
/// RS256, ES256 or EdDSA (never `none` nor HMAC) that is the algorithm of the `jwk` header's key;
/// a `jwk` that is a public key (a private member is refused) and verifies the signature; no
/// `crit`, `jku`, `x5u` or `x5c`; `htm` equal to the request's method; `htu` equal to the
/// request's URL, both normalized (``normalizedURL(_:)``); `iat` within ``window`` seconds
/// before now (and at most ``leeway`` after); a printable `jti`; and, for a proof that comes
/// with an access token, `ath` equal to the base64url SHA-256 of that token.
///
/// Replay and nonces are the caller's next steps, because where a used `jti` is kept (a table
/// shared by every instance, a process's memory) and which nonces are current belong to the
/// caller: ``VerifiedDPoPProof/replayExpiresAt`` says how long to keep the `jti`.
public struct DPoPProofVerifier: Sendable {
    /// The `typ` of a proof.
    public static let proofType = "dpop+jwt"
    /// Seconds a proof stays acceptable after its `iat`: long enough for a slow network and a
    /// modest clock skew, short enough that the replay cache stays small.
    public static let defaultWindow: Int64 = 60
    /// Seconds a proof's `iat` may lie in the future, for clocks a little ahead.
    public static let defaultLeeway: Int64 = 10

    /// Seconds after its `iat` that a proof is accepted.
    public let window: Int64
    /// Seconds before its `iat` that a proof is accepted.
    public let leeway: Int64
    /// The algorithms accepted; each key still verifies only its own.
    public let algorithms: Set<JWSAlgorithm>
    private let clock: KeyAuthClock

    /// - Parameters:
    ///   - window: seconds after `iat` a proof is accepted (and its `jti` must be kept).
    ///   - leeway: seconds before `iat` a proof is accepted.
    ///   - algorithms: the `alg` values accepted.
    ///   - clock: the time source; tests pass a fixed one.
    public init(
        window: Int64 = defaultWindow, leeway: Int64 = defaultLeeway,
        algorithms: Set<JWSAlgorithm> = Set(JWSAlgorithm.allCases), clock: KeyAuthClock = .system
    ) {
        self.window = window
        self.leeway = leeway
        self.algorithms = algorithms
        self.clock = clock
    }

    /// Checks `proof` for a request of `method` to `url`.
    ///
    /// - Parameters:
    ///   - proof: the `DPoP` header's value.
    ///   - method: the request's HTTP method, which `htm` must equal.
    ///   - url: the URL the client used, which `htu` must equal after normalization.
    ///   - accessToken: the token the request presents, whose hash the proof must carry as `ath`;
    ///     nil at a token endpoint.
    /// - Returns: the proof's key thumbprint, `jti`, `iat` and `nonce`.
    /// - Throws: `.dpopProofInvalid` naming the failed check (never echoing the proof).
    public func verify(_ proof: String, method: String, url: String, accessToken: String? = nil) throws(KeyAuthError)
        -> VerifiedDPoPProof
    {
        let jws: CompactJWS
        do {
            jws = try CompactJWS(parsing: proof, algorithms: algorithms, permittedHeaders: ["jwk"])
        } catch {
            throw Self.invalid(error.message.replacingOccurrences(of: "the token", with: "the proof"))
        }
        guard jws.headerValue("typ")?.stringValue == Self.proofType else {
            throw Self.invalid("its typ must be dpop+jwt")
        }
        guard let member = jws.headerValue("jwk") else { throw Self.invalid("it has no jwk header") }
        let key: JWSPublicKey
        do {
            key = try JWSPublicKey(jwk: JWK(jsonValue: member))
        } catch {
            throw Self.invalid(
                error.code == .keyRejected ? "its jwk holds a private key" : "its jwk is not a usable public key")
        }
        if case .rsa(let rsa) = key {
            // A proof's key is a device key (the token's cnf.jkt, the assertion's kid), so the
            // device-key policy applies; checked before the signature, because a key with a huge
            // exponent makes one failed check cost milliseconds of CPU.
            do {
                try rsa.checkPolicy()
            } catch {
                throw Self.invalid("its jwk is not a usable device key: \(error.message)")
            }
        }
        guard jws.isSignatureValid(with: key) else {
            throw Self.invalid("its signature does not verify with its jwk (or its alg is not the key's)")
        }
        let claims: JWTClaims
        do {
            claims = try jws.claimSet()
        } catch {
            throw Self.invalid("its payload is not a JSON object")
        }
        guard let htm = claims["htm"]?.stringValue, htm == method else {
            throw Self.invalid("its htm is not the request's method")
        }
        guard let htu = claims["htu"]?.stringValue, let proofURL = Self.normalizedURL(htu),
            let requestURL = Self.normalizedURL(url), proofURL == requestURL
        else { throw Self.invalid("its htu is not the request's URL") }
        guard let issuedAt = claims["iat"]?.integerValue else { throw Self.invalid("its iat must be an integer") }
        let now = clock.seconds
        guard issuedAt >= now - window, issuedAt <= now + leeway else {
            throw Self.invalid("its iat is outside the accepted window of \(window) s")
        }
        guard let jwtID = claims["jti"]?.stringValue, !jwtID.isEmpty, jwtID.utf8.count <= 256,
            jwtID.utf8.allSatisfy({ (0x21...0x7E).contains($0) })
        else { throw Self.invalid("its jti must be 1 to 256 printable ASCII characters") }
        if let accessToken {
            guard let ath = claims["ath"]?.stringValue else { throw Self.invalid("it has no ath for the access token") }
            guard let expected = try? Self.accessTokenHash(accessToken),
                CryptoPrimitives.constantTimeEquals(Array(ath.utf8), Array(expected.utf8))
            else { throw Self.invalid("its ath is not the hash of the access token") }
        }
        return VerifiedDPoPProof(
            keyThumbprint: key.thumbprint, publicKey: key, jwtID: jwtID, issuedAt: issuedAt,
            nonce: claims["nonce"]?.stringValue,
            // A second past the last one accepted: a cache that reads its clock a moment after
            // this check, in the next second, still finds the jti.
            replayExpiresAt: issuedAt.addingSaturating(window).addingSaturating(1))
    }

    /// `ath`: the base64url SHA-256 of the access token's ASCII (RFC 9449 section 4.2).
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL cannot digest.
    public static func accessTokenHash(_ token: String) throws(KeyAuthError) -> String {
        Base64URL.encode(try CryptoPrimitives.sha256(Array(token.utf8)))
    }

    /// A URL as RFC 9449 section 4.3 compares `htu`, with the syntax- and scheme-based
    /// normalization of RFC 3986 sections 6.2.2 and 6.2.3: scheme and host in lower case, the
    /// default port (80 for http, 443 for https) removed, an empty path as `/`, percent-encoded
    /// unreserved characters decoded and the other escapes' hex digits in upper case, `.` and
    /// `..` segments removed; no query or fragment, no user information. So a client and a
    /// server that spell one URL differently still agree. Nil for what is not an absolute
    /// http(s) URL.
    public static func normalizedURL(_ text: String) -> String? {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = components.host?.lowercased(), !host.isEmpty,
            components.user == nil, components.password == nil
        else { return nil }
        var result = scheme + "://" + (host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host)
        if let port = components.port, !(scheme == "http" && port == 80), !(scheme == "https" && port == 443) {
            result += ":\(port)"
        }
        guard let path = normalizedPath(components.percentEncodedPath) else { return nil }
        return result + (path.isEmpty ? "/" : path)
    }

    /// A percent-encoded path with its escapes normalized and its dot segments removed (RFC 3986
    /// sections 6.2.2.1 to 6.2.2.3 and 5.2.4); nil for a malformed escape.
    private static func normalizedPath(_ path: String) -> String? {
        var bytes: [UInt8] = []
        var input = Array(path.utf8)[...]
        while let byte = input.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard input.count >= 2, let high = Hex.value(ofDigit: input.removeFirst()),
                let low = Hex.value(ofDigit: input.removeFirst())
            else { return nil }
            let decoded = high << 4 | low
            if isUnreserved(decoded) {
                bytes.append(decoded)
            } else {
                let hex = String(decoded, radix: 16, uppercase: true)
                bytes.append(contentsOf: ("%" + (hex.count == 1 ? "0" + hex : hex)).utf8)
            }
        }
        var segments: [Substring] = []
        let parts = String(decoding: bytes, as: UTF8.self).split(separator: "/", omittingEmptySubsequences: false)
        for (index, segment) in parts.enumerated() {
            let isLast = index == parts.count - 1
            switch segment {
            case ".":
                if isLast { segments.append("") }
            case "..":
                if segments.count > 1 { segments.removeLast() }
                if isLast { segments.append("") }
            default:
                segments.append(segment)
            }
        }
        return segments.joined(separator: "/")
    }

    /// RFC 3986 section 2.3: ALPHA, DIGIT, `-`, `.`, `_`, `~`.
    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }

    private static func invalid(_ reason: String) -> KeyAuthError {
        KeyAuthError(.dpopProofInvalid, "the DPoP proof is not valid: \(reason)")
    }
}

/// A DPoP proof that passed ``DPoPProofVerifier``'s checks.
public struct VerifiedDPoPProof: Sendable, Equatable {
    /// The RFC 7638 thumbprint of the proof's key: what `cnf.jkt` must name.
    public let keyThumbprint: String
    /// The proof's key.
    public let publicKey: JWSPublicKey
    /// `jti`, to claim in a replay cache.
    public let jwtID: String
    /// `iat`.
    public let issuedAt: Int64
    /// `nonce`, when the proof carries one.
    public let nonce: String?
    /// Until when its `jti` must be kept, this second included: after it, the proof is refused
    /// as too old anyway. One second past the proof's window, so that a cache whose clock
    /// reading follows the verifier's still refuses it.
    public let replayExpiresAt: Int64
}

/// Remembers the `jti` of accepted DPoP proofs, so that a captured proof cannot be replayed.
public protocol DPoPReplayCache: Sendable {
    /// Records `jwtID` of the key `keyThumbprint` until `expiresAt`; false when it was already
    /// recorded. Check-and-record is one atomic step.
    ///
    /// - Throws: ``KeyAuthError`` when the cache cannot answer; the proof is then refused.
    func claim(jwtID: String, keyThumbprint: String, expiresAt: Int64) throws(KeyAuthError) -> Bool
}
