import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Talks to a keyauth server (PROTOCOL.md section 4): registration, login with the JWT bearer
/// grant, device management and discovery.
///
/// Every failure is a ``KeyAuthError``: the server's RFC 6749 errors as `.serverRejected` with an
/// ``OAuthError`` underneath (`authorization_pending` as `.approvalPending`, so that the
/// ``Authenticator`` polls), and an unreachable or silent server as `.transportFailed`. No
/// message ever holds a token, an assertion or a key: only the server's base URL and the
/// server's own (sanitized) description.
public struct KeyAuthClient: Sendable {
    /// The server's base URL, without a trailing slash.
    public let serverURL: String
    /// Seconds a request may take, connection included.
    public var timeout: TimeInterval { exchange.timeout }
    private let exchange: HTTPExchange
    private let clock: KeyAuthClock
    /// What the client learned of the server's DPoP support and its last nonce.
    private let dpopState = DPoPState()

    /// Whether a login binds its token to the device key with a DPoP proof (RFC 9449).
    public enum DPoPPolicy: Sendable, Equatable {
        /// When the server lists `dpop_signing_alg_values_supported`: a copied token is then
        /// useless without the key (the default).
        case whenSupported
        /// Only when the server requires it (`dpop_bound_access_tokens_required`): a Bearer token
        /// for scripts that send it with `curl -H "Authorization: Bearer ..."`.
        case whenRequired
        /// Never: Bearer tokens only.
        case never
    }

    /// Creates a client.
    ///
    /// - Parameters:
    ///   - serverURL: `https` with a host, optionally a path prefix; `http` only for a loopback
    ///     host (`127.0.0.0/8`, `::1`, `localhost`) unless `allowInsecureHTTP` is true.
    ///   - timeout: seconds a request may take before it fails with `.transportFailed`; a slow
    ///     server must not hang a login forever.
    ///   - allowInsecureHTTP: accept plain `http` to any host. Access tokens are bearer tokens:
    ///     anyone on the path can read one and use it until it expires.
    ///   - clock: the time source that turns `expires_in` into ``AccessToken/expiresAt``.
    /// - Throws: `.invalidArgument` for a URL that is not http(s) with a host, that carries a
    ///   query, a fragment or credentials (they would leak into logs and proxies), or that is
    ///   plain http to a host other than loopback without `allowInsecureHTTP`.
    public init(
        serverURL: String, timeout: TimeInterval = 10, allowInsecureHTTP: Bool = false, clock: KeyAuthClock = .system
    ) throws(KeyAuthError) {
        self.serverURL = try Self.normalizedServerURL(serverURL, allowInsecureHTTP: allowInsecureHTTP)
        self.exchange = HTTPExchange(timeout: timeout)
        self.clock = clock
    }

    /// Checks a server URL and removes trailing slashes, so that it can serve as the fallback
    /// issuer and as a prefix for endpoint paths.
    ///
    /// - Parameters:
    ///   - text: the URL as the person gave it.
    ///   - allowInsecureHTTP: accept `http://` to a host that is not loopback.
    /// - Throws: `.invalidArgument`, as ``init(serverURL:timeout:allowInsecureHTTP:clock:)``; the
    ///   message for plain http names `--insecure-http`, the command's way to allow it.
    public static func normalizedServerURL(_ text: String, allowInsecureHTTP: Bool = false) throws(KeyAuthError)
        -> String
    {
        var trimmed = Substring(text)
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let components = URLComponents(string: String(trimmed)),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.host, !host.isEmpty
        else {
            throw KeyAuthError(.invalidArgument, "the server URL must be http:// or https:// with a host name")
        }
        guard components.query == nil, components.fragment == nil, components.user == nil,
            components.password == nil
        else {
            throw KeyAuthError(.invalidArgument, "the server URL must not have a query, a fragment or credentials")
        }
        if scheme == "http", !allowInsecureHTTP, !isLoopbackHost(host) {
            throw KeyAuthError(
                .invalidArgument,
                "the server URL uses plain http:// to \(host), which is not loopback: access tokens would cross "
                    + "the network readable by anyone on the path; use https://, or pass --insecure-http "
                    + "(allowInsecureHTTP in the library) to accept that risk")
        }
        return String(trimmed)
    }

    /// Whether `host` is this machine: `localhost`, an IPv4 address in `127.0.0.0/8`, or `::1`
    /// (with or without brackets).
    ///
    /// Only literal addresses and the name `localhost` count; another name that resolves to
    /// loopback today may resolve elsewhere tomorrow.
    public static func isLoopbackHost(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if name == "localhost" { return true }
        var ipv4 = in_addr()
        if inet_pton(AF_INET, name, &ipv4) == 1 {
            return UInt32(bigEndian: ipv4.s_addr) >> 24 == 127
        }
        var ipv6 = in6_addr()
        guard inet_pton(AF_INET6, name, &ipv6) == 1 else { return false }
        return withUnsafeBytes(of: &ipv6) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
    }

    // MARK: - Endpoints

    /// Reads `/.well-known/openid-configuration` for the issuer and endpoints.
    ///
    /// A wrong `--server` (a web site, a typo in the port, another OAuth server) is the usual
    /// cause of a failed discovery, so its error names the URL tried and says so.
    /// - Throws: `.transportFailed`; `.serverRejected` for an error answer or a document without
    ///   an `issuer`.
    public func discover() async throws(KeyAuthError) -> ServerMetadata {
        let path = "/.well-known/openid-configuration"
        do {
            let reply = try await send("GET", path)
            let object = try expectObject(reply, success: [200], operation: "discovery")
            return try read(object, "the discovery document", ServerMetadata.init(jsonValue:))
        } catch {
            guard error.code == .serverRejected else { throw error }
            throw KeyAuthError(
                .serverRejected,
                "\(serverURL) does not look like a keyauth server: GET \(serverURL + path) failed (\(error.message))",
                underlying: error.underlying ?? error)
        }
    }

    /// Registers a public key with proof of possession (`POST /v1/devices`).
    ///
    /// - Parameters:
    ///   - publicKey: the new key; only its SPKI PEM is sent.
    ///   - proof: an assertion signed by the new key (PROTOCOL.md section 2).
    ///   - enrollment: the user, the device name and an optional enrollment code.
    /// - Returns: the server's record: 201 active, 202 pending, 200 an existing registration.
    /// - Throws: `.serverRejected` (`invalid_request` for a bad user or key, 409 for a key of
    ///   another user, `access_denied` for a missing or wrong enrollment code), `.transportFailed`.
    public func registerDevice(
        publicKey: RSAPublicKey, proof: String, enrollment: DeviceEnrollment
    ) async throws(KeyAuthError) -> DeviceRegistration {
        let request = RegistrationRequest(
            user: enrollment.user, name: enrollment.deviceName, publicKeyPEM: publicKey.pemRepresentation,
            proof: proof, enrollmentCode: enrollment.enrollmentCode)
        let reply = try await send("POST", "/v1/devices", body: request.jsonBody, contentType: "application/json")
        let object = try expectObject(reply, success: [200, 201, 202], operation: "registration")
        let answer = try read(object, "the registration answer", RegistrationResponse.init(jsonValue:))
        guard answer.keyID == publicKey.fingerprint else {
            throw KeyAuthError(.serverRejected, "the server recorded a key id that is not this key's fingerprint")
        }
        return DeviceRegistration(
            keyID: answer.keyID, user: answer.user ?? enrollment.user, name: answer.name ?? enrollment.deviceName,
            status: answer.status, isNew: reply.status != 200)
    }

    /// Whether a login under `policy` binds its token, from the server's discovery document
    /// (read once per client).
    ///
    /// - Throws: as ``discover()``, except for a server whose document cannot be read, which is
    ///   taken as one without DPoP.
    public func shouldBindTokens(_ policy: DPoPPolicy) async throws(KeyAuthError) -> Bool {
        guard policy != .never else { return false }
        let metadata: ServerMetadata?
        if let known = dpopState.metadata {
            metadata = known
        } else {
            do {
                metadata = try await discover()
            } catch {
                guard error.code == .serverRejected else { throw error }
                metadata = nil
            }
            dpopState.metadata = metadata
        }
        guard let metadata, metadata.supportsDPoP else { return false }
        return policy == .whenSupported || metadata.dpopRequired
    }

    /// Logs in with a device assertion (`POST /oauth/token`, RFC 7523 JWT bearer grant), with a
    /// DPoP proof of `proofs`' key when given, which binds the token to that key.
    ///
    /// A server that answers `use_dpop_nonce` gets the same assertion once more, with a proof that
    /// carries the nonce it sent.
    /// - Parameters:
    ///   - assertion: the device assertion (PROTOCOL.md section 2).
    ///   - proofs: the device key's proof builder; nil for a Bearer token.
    /// - Throws: `.approvalPending` while the device waits for approval (`authorization_pending`);
    ///   `.serverRejected` with the ``OAuthError`` for `access_denied`, `expired_token`,
    ///   `invalid_grant`, `invalid_dpop_proof` and the rest; `.transportFailed`.
    public func requestToken(assertion: String, proofs: DPoPProofBuilder? = nil) async throws(KeyAuthError)
        -> AccessToken
    {
        let body = FormURLEncoding.encode(["grant_type": OAuthGrantType.jwtBearer.rawValue, "assertion": assertion])
        let sentAt = clock.now
        let reply = try await sendRetryingNonce(proofs: proofs) { (proof) throws(KeyAuthError) in
            try await send(
                "POST", "/oauth/token", body: Array(body.utf8), contentType: "application/x-www-form-urlencoded",
                proof: proof, proofAccessToken: nil)
        }
        let object = try expectObject(reply, success: [200], operation: "login")
        let answer = try read(object, "the token answer", TokenResponse.init(jsonValue:))
        let value = answer.accessToken
        let tokenType: String
        switch answer.tokenType.lowercased() {
        case TokenResponse.bearer.lowercased(): tokenType = TokenResponse.bearer
        case TokenResponse.dpop.lowercased() where proofs != nil: tokenType = TokenResponse.dpop
        default:
            throw KeyAuthError(
                .serverRejected, "the server issued a \(answer.tokenType) token, which this login did not ask for")
        }
        let lifetime: TimeInterval
        if let expiresIn = answer.expiresIn {
            lifetime = TimeInterval(expiresIn)
        } else if let exp = (try? CompactJWS(parsing: value).claims())?["exp"]?.integerValue {
            lifetime = max(0, TimeInterval(exp) - sentAt.timeIntervalSince1970)
        } else {
            // Without either, assume the shortest lifetime that still saves a login per command.
            lifetime = 60
        }
        // Counting from when the request left keeps the expiry on the safe side of the server's.
        return AccessToken(value: value, tokenType: tokenType, expiresAt: sentAt.addingTimeInterval(lifetime))
    }

    /// Devices asked for per page of `GET /v1/devices` (`limit`).
    public static let devicePageSize = 100
    /// Pages followed at most: a server that keeps answering with a `next_cursor`, by mistake or
    /// on purpose, cannot keep the client fetching (and holding the answers) without end.
    public static let maximumDevicePages = 10

    /// Lists the caller's devices (`GET /v1/devices?limit=100`), following `next_cursor` for up
    /// to ``maximumDevicePages`` pages.
    ///
    /// - Returns: the devices; marked truncated when the server still had a `next_cursor` after
    ///   the last page read.
    /// - Throws: `.serverRejected` with `invalid_token` when the token is expired or revoked; for
    ///   an answer without a `devices` array, an entry without `kid` or `status`, a
    ///   `registered_from` that is neither a string nor null, or a `next_cursor` that is not a
    ///   non-empty string (or repeats one already followed).
    public func listDevices(accessToken: AccessToken, proofs: DPoPProofBuilder? = nil) async throws(KeyAuthError)
        -> DeviceList
    {
        var devices: [Device] = []
        var followed: Set<String> = []
        var path = "/v1/devices?limit=\(Self.devicePageSize)"
        for _ in 0..<Self.maximumDevicePages {
            let reply = try await send("GET", path, accessToken: accessToken, proofs: proofs)
            let object = try expectObject(reply, success: [200], operation: "device list")
            let page: DeviceListPage
            do {
                page = try DeviceListPage(jsonValue: .object(object))
            } catch {
                throw malformed(error, document: "the device list", operation: "device list")
            }
            devices += page.devices
            guard let cursor = page.nextCursor else { return DeviceList(devices: devices, isTruncated: false) }
            guard !followed.contains(cursor) else {
                throw KeyAuthError(.serverRejected, "the device list of \(serverURL) has an invalid next_cursor")
            }
            followed.insert(cursor)
            path = "/v1/devices?limit=\(Self.devicePageSize)&cursor=" + FormURLEncoding.encode(cursor)
        }
        return DeviceList(devices: devices, isTruncated: true)
    }

    /// Approves a pending device of the same user (`POST /v1/devices/{kid}/approve`).
    ///
    /// - Parameters:
    ///   - keyID: the pending device.
    ///   - assertion: a fresh device assertion of this device, signed after its presence check,
    ///     with the claims `approve_kid` (the pending device's key id) and `amr`: the server
    ///     takes no approval on an access token alone.
    ///   - accessToken: this device's access token.
    ///   - proofs: the device key's proof builder, for a DPoP-bound `accessToken`.
    /// - Returns: the device as the server recorded it, with its name, creation time and the
    ///   address it registered from, so that the caller can show what was let in.
    /// - Throws: `.invalidArgument` for a kid that is not a fingerprint; `.serverRejected` with
    ///   `not_found` for an unknown device or another user's, `invalid_grant` for a refused
    ///   assertion, and for an answer that is not the entry of the device asked for.
    @discardableResult
    public func approveDevice(
        keyID: String, assertion: String, accessToken: AccessToken, proofs: DPoPProofBuilder? = nil
    ) async throws(KeyAuthError) -> Device {
        let path = "/v1/devices/" + (try Self.checkedKeyID(keyID)) + "/approve"
        let body = JSONValue.object(["assertion": .string(assertion)])
        let reply = try await send(
            "POST", path, body: Array(body.serialized().utf8), contentType: "application/json",
            accessToken: accessToken, proofs: proofs)
        let object = try expectObject(reply, success: [200], operation: "approval")
        let device: Device
        do {
            device = try Device(jsonValue: .object(object))
        } catch {
            throw malformed(WireFormatError(error.problem, isInEntry: true), document: "", operation: "approval")
        }
        guard device.keyID == keyID else {
            throw KeyAuthError(.serverRejected, "the approval answer of \(serverURL) names another device")
        }
        return device
    }

    /// Reads a document with a wire type's decoder, naming the server and the document when it
    /// does not have the protocol's shape.
    private func read<Value>(
        _ object: [String: JSONValue], _ document: String,
        _ decode: (JSONValue) throws(WireFormatError) -> Value
    ) throws(KeyAuthError) -> Value {
        do {
            return try decode(.object(object))
        } catch {
            throw malformed(error, document: document, operation: "")
        }
    }

    /// The error for an answer without the protocol's shape; a problem in one device entry names
    /// the operation whose answer held it.
    private func malformed(_ error: WireFormatError, document: String, operation: String) -> KeyAuthError {
        let subject =
            error.isInEntry ? "a device in the \(operation) answer of \(serverURL)" : "\(document) of \(serverURL)"
        return KeyAuthError(.serverRejected, "\(subject) \(error.problem)")
    }

    /// Revokes one of the caller's devices, or denies a pending one (`DELETE /v1/devices/{kid}`).
    ///
    /// - Throws: `.invalidArgument` for a kid that is not a fingerprint; `.serverRejected` with
    ///   `not_found` for an unknown device, `access_denied` for another user's device.
    public func revokeDevice(keyID: String, accessToken: AccessToken, proofs: DPoPProofBuilder? = nil)
        async throws(KeyAuthError)
    {
        let path = "/v1/devices/" + (try Self.checkedKeyID(keyID))
        let reply = try await send("DELETE", path, accessToken: accessToken, proofs: proofs)
        try expectSuccess(reply, success: [200, 204], operation: "revocation")
    }

    // MARK: - Plumbing

    /// A resource request with `accessToken`: as Bearer, or for a DPoP token with the DPoP scheme
    /// and a fresh proof of `proofs`' key (again once with the server's nonce when it asks).
    ///
    /// - Throws: `.invalidArgument` for a DPoP token without `proofs`; the request's errors.
    func send(
        _ method: String, _ path: String, body: [UInt8]? = nil, contentType: String? = nil, accessToken: AccessToken,
        proofs: DPoPProofBuilder?
    ) async throws(KeyAuthError) -> HTTPExchange.Reply {
        guard accessToken.tokenType == TokenResponse.dpop else {
            return try await send(
                method, path, body: body, contentType: contentType, authorization: "Bearer " + accessToken.value)
        }
        guard let proofs else {
            throw KeyAuthError(.invalidArgument, "a DPoP-bound access token needs the device key to sign a proof")
        }
        return try await sendRetryingNonce(proofs: proofs) { (proof) throws(KeyAuthError) in
            try await send(
                method, path, body: body, contentType: contentType, authorization: "DPoP " + accessToken.value,
                proof: proof, proofAccessToken: accessToken.value)
        }
    }

    /// Sends with a proof from `proofs` (none when nil), and once more with a new proof when the
    /// server answers `use_dpop_nonce` with a `DPoP-Nonce`; remembers the server's last nonce.
    private func sendRetryingNonce(
        proofs: DPoPProofBuilder?, _ attempt: (DPoPAttempt?) async throws(KeyAuthError) -> HTTPExchange.Reply
    ) async throws(KeyAuthError) -> HTTPExchange.Reply {
        guard let proofs else { return try await attempt(nil) }
        var reply = try await attempt(DPoPAttempt(builder: proofs, nonce: dpopState.nonce))
        if let nonce = reply.headers["dpop-nonce"] {
            let retry = Self.oauthError(in: reply).error == .useDPoPNonce && nonce != dpopState.nonce
            dpopState.nonce = nonce
            if retry { reply = try await attempt(DPoPAttempt(builder: proofs, nonce: nonce)) }
            if let next = reply.headers["dpop-nonce"] { dpopState.nonce = next }
        }
        return reply
    }

    /// One proof to sign for a request: the builder and the nonce to put in it.
    private struct DPoPAttempt {
        let builder: DPoPProofBuilder
        let nonce: String?
    }

    private func send(
        _ method: String, _ path: String, body: [UInt8]? = nil, contentType: String? = nil,
        authorization: String? = nil, proof: DPoPAttempt? = nil, proofAccessToken: String? = nil
    ) async throws(KeyAuthError) -> HTTPExchange.Reply {
        guard let url = URL(string: serverURL + path) else {
            throw KeyAuthError(.invalidArgument, "cannot form a request URL from \(serverURL)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("keyauth/\(KeyAuthClient.version)", forHTTPHeaderField: "User-Agent")
        if let contentType { request.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        if let authorization { request.setValue(authorization, forHTTPHeaderField: "Authorization") }
        if let proof {
            let signed = try proof.builder.proof(
                method: method, url: serverURL + path, accessToken: proofAccessToken, nonce: proof.nonce)
            request.setValue(signed, forHTTPHeaderField: "DPoP")
        }
        if let body { request.httpBody = Data(body) }
        return try await exchange.send(request, server: serverURL)
    }

    /// The version sent as `User-Agent`, also printed by `keyauth --version`.
    public static let version = "0.1.0"

    func expectObject(
        _ reply: HTTPExchange.Reply, success: Set<Int>, operation: String
    ) throws(KeyAuthError) -> [String: JSONValue] {
        try expectSuccess(reply, success: success, operation: operation)
        guard let object = try? JSONValue(parsing: reply.body).objectValue else {
            throw KeyAuthError(.serverRejected, "the \(operation) answer of \(serverURL) is not a JSON object")
        }
        return object
    }

    private func expectSuccess(_ reply: HTTPExchange.Reply, success: Set<Int>, operation: String) throws(KeyAuthError) {
        guard !success.contains(reply.status) else { return }
        throw Self.error(for: Self.oauthError(in: reply), operation: operation)
    }

    /// The RFC 6749 error in an answer, or one derived from its status when the body is not one.
    static func oauthError(in reply: HTTPExchange.Reply) -> OAuthError {
        if let object = try? JSONValue(parsing: reply.body).objectValue, let code = object["error"]?.stringValue,
            !code.isEmpty
        {
            return OAuthError(
                error: OAuthError.Code(rawValue: code), errorDescription: object["error_description"]?.stringValue,
                statusCode: reply.status, retryAfter: reply.retryAfter)
        }
        return OAuthError(
            error: OAuthError.code(forStatus: reply.status),
            errorDescription: "HTTP \(reply.status) without an OAuth error body", statusCode: reply.status,
            retryAfter: reply.retryAfter)
    }

    /// Turns a server error into the library's error, with a message for people.
    static func error(for oauth: OAuthError, operation: String) -> KeyAuthError {
        let detail = oauth.errorDescription.map { ": \($0)" } ?? ""
        let message: String
        switch oauth.error {
        case .authorizationPending:
            return KeyAuthError(
                .approvalPending, "this device waits for approval by another device of the user", underlying: oauth)
        case .accessDenied where operation == "login":
            message = "the server denied this device (access_denied)\(detail)"
        case .expiredToken:
            message = "the pending registration expired before another device approved it (expired_token)"
        case .invalidGrant:
            message = "the server refused the device key (invalid_grant)\(detail)"
        case .invalidToken:
            message = "the server refused the access token (invalid_token)\(detail)"
        case .slowDown:
            let wait = oauth.retryAfter.map { "try again in \($0) s" } ?? "try again later"
            message = "rate-limited: the server refuses more attempts from this address for now (slow_down); \(wait)"
        case .temporarilyUnavailable:
            let wait = oauth.retryAfter.map { "; retry in \($0) s" } ?? ""
            message = "the server is temporarily unavailable (temporarily_unavailable)\(wait)"
        default:
            message = "the server refused the \(operation) (\(oauth.error.rawValue))\(detail)"
        }
        return KeyAuthError(.serverRejected, message, underlying: oauth, retryAfter: oauth.retryAfter)
    }

    /// A kid goes into a URL path, so only the base64url alphabet is accepted.
    static func checkedKeyID(_ keyID: String) throws(KeyAuthError) -> String {
        guard InputRules.isValidKeyID(keyID) else {
            throw KeyAuthError(.invalidArgument, "a device id is 43 characters of base64url (A-Z a-z 0-9 - _)")
        }
        return keyID
    }

    /// Whether `keyID` has the shape of an RFC 7638 SHA-256 thumbprint, as the server requires.
    public static func isValidKeyID(_ keyID: String) -> Bool {
        InputRules.isValidKeyID(keyID)
    }
}

/// What a client learned of its server's DPoP support, and the server's last nonce: shared by
/// copies of the client, so that a nonce learned at login serves the requests after it.
private final class DPoPState: Sendable {
    private struct State {
        var metadata: ServerMetadata??
        var nonce: String?
    }

    private let state = Mutex(State())

    /// The discovery document once read (`.some(nil)`: read and not usable).
    var metadata: ServerMetadata?? {
        get { state.withLock { $0.metadata } }
        set { state.withLock { $0.metadata = newValue } }
    }

    /// The last `DPoP-Nonce` the server sent.
    var nonce: String? {
        get { state.withLock { $0.nonce } }
        set { state.withLock { $0.nonce = newValue } }
    }
}
