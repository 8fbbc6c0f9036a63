/// A compact JWS split and decoded, before any signature or claim check (PROTOCOL.md section 2,
/// rules 1 and 2).
///
/// Parsing is strict so that one token has exactly one text: three segments, canonical
/// base64url, JSON objects with no duplicate members, at most 8 KiB.
package struct CompactJWS: Sendable {
    /// Tokens longer than this are refused before any decoding.
    package static let maximumLength = 8 * 1024

    /// Header members that would let a token choose its own key or add unknown semantics.
    package static let forbiddenHeaders: Set<String> = ["crit", "jwk", "jku", "x5u", "x5c"]

    /// The decoded header's members, in a fixed order (an object with the claims' rules).
    private let headerMembers: JWTClaims
    /// The decoded header.
    package var header: [String: JSONValue] { headerMembers.jsonValue.objectValue ?? [:] }
    /// The header's `alg`, one of those the parser was told to accept.
    package let algorithm: JWSAlgorithm
    /// The decoded payload bytes (JSON claims for a JWT; any bytes for a bare JWS).
    package let payload: [UInt8]
    /// The raw `header.payload` bytes as received: what the signature covers.
    package let signingInput: [UInt8]
    /// The decoded signature.
    package let signature: [UInt8]

    /// Splits and decodes a compact JWS and checks the header (rules 1 and 2).
    ///
    /// - Parameters:
    ///   - algorithms: the `alg` values accepted; RS256 alone for device assertions. `none` and
    ///     the HMAC family are not ``JWSAlgorithm`` values, so no caller can accept them.
    ///   - permittedHeaders: members of ``forbiddenHeaders`` this kind of token carries on
    ///     purpose (`jwk` in a DPoP proof, whose checker then binds that key).
    /// - Throws: `.tokenMalformed` for structure and encoding, `.claimInvalid` for a refused
    ///   algorithm or header member.
    package init(
        parsing token: String, algorithms: Set<JWSAlgorithm> = [.rs256], permittedHeaders: Set<String> = []
    ) throws(KeyAuthError) {
        let bytes = Array(token.utf8)
        guard !bytes.isEmpty else { throw KeyAuthError(.tokenMalformed, "the token is empty") }
        guard bytes.count <= Self.maximumLength else {
            throw KeyAuthError(.tokenMalformed, "the token is longer than \(Self.maximumLength) bytes")
        }
        let dot = UInt8(ascii: ".")
        guard let first = bytes.firstIndex(of: dot), let second = bytes[(first + 1)...].firstIndex(of: dot),
            !bytes[(second + 1)...].contains(dot)
        else {
            throw KeyAuthError(.tokenMalformed, "a token has exactly three dot-separated segments")
        }
        let headerBytes = bytes[..<first]
        let payloadBytes = bytes[(first + 1)..<second]
        let signatureBytes = bytes[(second + 1)...]
        guard let headerJSON = Base64URL.decode(utf8: headerBytes),
            let payloadJSON = Base64URL.decode(utf8: payloadBytes),
            let signature = Base64URL.decode(utf8: signatureBytes), !headerJSON.isEmpty, !payloadJSON.isEmpty,
            !signature.isEmpty
        else { throw KeyAuthError(.tokenMalformed, "a token segment is not canonical base64url") }
        guard let header = try? JWTClaims(parsingObject: headerJSON) else {
            throw KeyAuthError(.tokenMalformed, "the token header is not a JSON object")
        }
        guard let name = header["alg"]?.stringValue, let algorithm = JWSAlgorithm(rawValue: name),
            algorithms.contains(algorithm)
        else {
            let names = JWSAlgorithm.allCases.filter(algorithms.contains).map(\.rawValue)
            throw KeyAuthError(
                .claimInvalid,
                names.count == 1
                    ? "the token algorithm must be \(names[0])"
                    : "the token algorithm must be one of \(names.joined(separator: ", "))")
        }
        let forbidden =
            permittedHeaders.isEmpty ? Self.forbiddenHeaders : Self.forbiddenHeaders.subtracting(permittedHeaders)
        if let member = header.firstName(where: forbidden.contains) {
            throw KeyAuthError(.claimInvalid, "the token header member \"\(member)\" is not accepted")
        }
        self.headerMembers = header
        self.algorithm = algorithm
        self.payload = payloadJSON
        self.signingInput = Array(bytes[..<second])
        self.signature = signature
    }

    /// The header member `name`, or nil.
    package func headerValue(_ name: String) -> JSONValue? { headerMembers[name] }

    /// The payload as a JWT claims set.
    ///
    /// - Throws: `.tokenMalformed` when the payload is not a UTF-8 JSON object.
    package func claims() throws(KeyAuthError) -> [String: JSONValue] {
        try claimSet().jsonValue.objectValue ?? [:]
    }

    /// The payload as ``JWTClaims``, read straight into their order: what verifiers check.
    ///
    /// - Throws: `.tokenMalformed` when the payload is not a UTF-8 JSON object.
    package func claimSet() throws(KeyAuthError) -> JWTClaims {
        guard let claims = try? JWTClaims(parsingObject: payload) else {
            throw KeyAuthError(.tokenMalformed, "the token payload is not a JSON object")
        }
        return claims
    }

    /// Whether the signature verifies with `key` over the raw signing input.
    package func isSignatureValid(with key: RSAPublicKey) -> Bool {
        isSignatureValid(with: .rsa(key))
    }

    /// Whether the token's `alg` is the one `key` allows and the signature verifies with it over
    /// the raw signing input.
    package func isSignatureValid(with key: JWSPublicKey) -> Bool {
        algorithm == key.algorithm && key.isValidSignature(signature, for: signingInput)
    }

    /// The `kid` header, or nil.
    package var keyID: String? { headerMembers["kid"]?.stringValue }
}
