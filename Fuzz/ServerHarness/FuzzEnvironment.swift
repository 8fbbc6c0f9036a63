import Foundation
import KeyAuth
import KeyAuthServer

/// One server under fuzzing, with its database, clients, devices and credentials, and the
/// placeholders an input may use:
///
/// | placeholder | becomes |
/// |---|---|
/// | `{{issuer}}`, `{{user}}`, `{{kid}}`, `{{pending_kid}}` | the issuer, `alice`, her device's and her pending device's key ids |
/// | `{{assertion}}` | a fresh login assertion of alice's device |
/// | `{{approval}}` | a fresh approval assertion (`auth_req_id`, `amr`, the right `binding_code`) for `{{request_id}}` |
/// | `{{request_id}}`, `{{request_code}}` | the `auth_req_id` of the input's last `/bc-authorize`, else alice's newest open request; its code |
/// | `{{device_approval}}` | a fresh assertion approving the pending device (`approve_kid`, `amr`) |
/// | `{{register}}` | a registration body for a new key of `bob` with its proof |
/// | `{{token}}`, `{{dpop_token}}` | a Bearer and a DPoP-bound access token of alice's device |
/// | `{{dpop}}` | a fresh DPoP proof of alice's device for this request (with the last nonce, and `ath` for a `DPoP` token) |
/// | `{{client_id}}`, `{{client_secret}}`, `{{basic}}` | the confidential relying party, its secret, its Basic credentials |
/// | `{{public_client_id}}`, `{{ciba_client_id}}`, `{{ciba_basic}}` | the public native client; the CIBA client |
/// | `{{redirect_uri}}`, `{{loopback_redirect}}`, `{{logout_uri}}` | their registered URIs |
/// | `{{pkce_verifier}}`, `{{pkce_challenge}}` | a PKCE pair |
/// | `{{session}}`, `{{session_csrf}}` | a signed-in browser session's cookie value and CSRF token |
/// | `{{csrf}}` | a double-submit token, for both the cookie and the form |
/// | `{{code}}`, `{{auth_req_id}}`, `{{authorization}}`, `{{cookie}}`, `{{page_csrf}}`, `{{id_token}}`, `{{access_token}}`, `{{nonce}}` | what the input's previous responses handed out |
///
/// Two header fields steer the signing and are not sent: `X-Fuzz-Claims: {JSON object}` is
/// merged into the claims of `{{assertion}}` and `{{approval}}` (so a mutated `exp` or `iat`
/// arrives validly signed), and `X-Fuzz-Nonce: TEXT` is the nonce `{{dpop}}` carries.
final class FuzzEnvironment {
    let keys: FuzzKeys
    let clock: FuzzClock
    let log = FuzzLog()
    let directory: String
    let storage: SQLiteStorage
    let responder: KeyAuthResponder

    static let user = "alice"
    static let relyingParty = (
        id: "ZnV6ei1yZWx5aW5nLXBhcnR5", secret: "c2VjcmV0LW9mLXRoZS1yZWx5aW5nLXBhcnR5LWZvci1mdXp6"
    )
    static let nativeClient = "ZnV6ei1uYXRpdmUtY2xpZW50"
    static let ciba = (id: "ZnV6ei1jaWJhLWNsaWVudC0x", secret: "c2VjcmV0LW9mLXRoZS1jaWJhLWNsaWVudC1mb3ItZnV6eg")
    static let redirectURI = "https://app.example/cb"
    static let loopbackRedirect = "http://127.0.0.1/cb"
    static let logoutURI = "https://app.example/signed-out"
    /// 43 characters, as the server's own double-submit tokens.
    static let csrf = "Y3NyZi10b2tlbi1vZi10aGUtZnV6ei1oYXJuZXNzLTE"

    private(set) var token = ""
    private(set) var dpopToken = ""
    private(set) var session = ""
    private(set) var sessionCSRF = ""
    private(set) var nonce = ""
    let pkceVerifier = "dmVyaWZpZXItb2YtdGhlLWZ1enotaGFybmVzcy0xMjM0NTY3ODkw"
    let pkceChallenge: String

    /// A new database in memory-backed storage when the machine has it, the clients, alice's
    /// devices, and credentials.
    init(keys: FuzzKeys, clock: FuzzClock) throws {
        self.keys = keys
        self.clock = clock
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        directory = base + "/keyauth-fuzz-\(getpid())-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        storage = try SQLiteStorage(path: directory + "/server.db", now: clock.closure)
        var configuration = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:0"))
        configuration.database = directory + "/server.db"
        configuration.enrollment = .open
        configuration.signingKeyBits = 2048
        configuration.dpopNonce = true
        configuration.failureLimit = 1_000_000_000
        configuration.registrationLimit = 1_000_000_000
        configuration.longPolls = 0
        configuration.logRequests = true
        responder = try KeyAuthResponder(
            configuration: configuration, issuer: Self.issuer, storage: storage, log: log, now: clock.closure)
        pkceChallenge = Base64URL.encode(try CryptoPrimitives.sha256(Array(pkceVerifier.utf8)))
        try addClients()
        try registerDevices()
        try refreshCredentials()
    }

    deinit {
        storage.close()
        try? FileManager.default.removeItem(atPath: directory)
    }

    static var issuer: String { ServerFuzzHarness.issuer }

    private func addClients() throws {
        let now = clock.now
        _ = try storage.insertClient(
            ClientRecord(
                id: Self.relyingParty.id, name: "Fuzz App",
                secretHash: try CryptoPrimitives.sha256(Array(Self.relyingParty.secret.utf8)), createdAt: now,
                redirectURIs: [Self.redirectURI], postLogoutRedirectURIs: [Self.logoutURI]))
        _ = try storage.insertClient(
            ClientRecord(
                id: Self.nativeClient, name: "Fuzz Native", secretHash: [], createdAt: now,
                redirectURIs: [Self.loopbackRedirect], isPublic: true))
        _ = try storage.insertClient(
            ClientRecord(
                id: Self.ciba.id, name: "Fuzz Desk",
                secretHash: try CryptoPrimitives.sha256(Array(Self.ciba.secret.utf8)),
                createdAt: now))
    }

    private func registerDevices() throws {
        for (key, expected) in [(keys.device, 201), (keys.pending, 202)] {
            let body = try registration(user: Self.user, key: key)
            let response = responder.respond(
                to: HTTPRequest(
                    method: "POST", path: "/v1/devices", headers: ["Content-Type": "application/json"],
                    body: Array(body.utf8)))
            guard response.status == expected else {
                throw FuzzSetupError(
                    "registration answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
            }
        }
    }

    /// New access tokens (Bearer and DPoP-bound) and a new signed-in browser session.
    func refreshCredentials() throws {
        token = try login(proof: nil)
        // The first proof has no nonce: the answer carries one.
        let probe = responder.respond(to: try loginRequest(proof: try proof(method: "POST", path: "/oauth/token")))
        nonce = probe.headers["DPoP-Nonce"] ?? ""
        dpopToken = try login(proof: try proof(method: "POST", path: "/oauth/token"))
        session = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
        sessionCSRF = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
        try storeSession()
    }

    /// Stores the signed-in session again when an input ended it (signed out, or revoked its
    /// device), so that later inputs still reach the signed-in pages.
    private func restoreSession() throws {
        guard try storage.browserSession(idHash: try CryptoPrimitives.sha256(Array(session.utf8))) == nil else {
            return
        }
        try storeSession()
    }

    private func storeSession() throws {
        let now = clock.now
        try storage.insertBrowserSession(
            BrowserSessionRecord(
                idHash: try CryptoPrimitives.sha256(Array(session.utf8)), csrfToken: sessionCSRF, user: Self.user,
                signInRequestID: nil, bindingCode: "42", approvingKID: keys.device.publicKey.fingerprint,
                methods: ["swk", "pin"], createdAt: now, expiresAt: now + 900, signedInAt: now))
    }

    private func login(proof: String?) throws -> String {
        let response = responder.respond(to: try loginRequest(proof: proof))
        if let fresh = response.headers["DPoP-Nonce"] { nonce = fresh }
        guard response.status == 200, let token = (try? JSONValue(parsing: response.body))?["access_token"]?.stringValue
        else {
            throw FuzzSetupError("login answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
        }
        return token
    }

    private func loginRequest(proof: String?) throws -> HTTPRequest {
        var headers: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]
        if let proof { headers.add("DPoP", proof) }
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + (try assertion())
        return HTTPRequest(method: "POST", path: "/oauth/token", headers: headers, body: Array(form.utf8))
    }

    // MARK: Signed values

    /// A fresh device assertion of alice's device, with `extra` claims.
    func assertion(extra: JWTClaims = JWTClaims(), key: RSAPrivateKey? = nil) throws -> String {
        try JWTBuilder(key: key ?? keys.device, audience: Self.issuer, clock: clock.keyAuthClock).sign(claims: extra)
    }

    /// A fresh DPoP proof of alice's device.
    func proof(method: String, path: String, accessToken: String? = nil, nonce chosen: String? = nil) throws -> String {
        let nonce = chosen ?? self.nonce
        return try DPoPProofBuilder(key: keys.device, clock: clock.keyAuthClock).proof(
            method: method, url: Self.issuer + path, accessToken: accessToken, nonce: nonce.isEmpty ? nil : nonce)
    }

    /// A registration body for `key` as `user`, with its proof.
    func registration(user: String, key: RSAPrivateKey) throws -> String {
        JSONValue.object([
            "user": .string(user), "name": .string("fuzz device"),
            "public_key": .string(key.publicKey.pemRepresentation), "proof": .string(try assertion(key: key)),
        ]).serialized()
    }

    /// The request id an approval names: the input's last `auth_req_id`, else alice's newest
    /// open request.
    private func requestID(_ captures: FuzzCaptures) throws -> String {
        if let id = captures.values["auth_req_id"] { return id }
        return try storage.openSignInRequests(user: Self.user, now: clock.now).last?.id ?? ""
    }

    // MARK: Expansion

    /// The request of `bytes` with its placeholders filled in, and the secrets it carries, which
    /// must never reach the log.
    func expand(_ bytes: [UInt8], captures: FuzzCaptures) throws -> (FuzzRequest, [String]) {
        guard bytes.contains(UInt8(ascii: "{")) else {
            return (FuzzRequest(parsing: bytes), fixedSecrets)
        }
        var secrets = fixedSecrets
        let raw = FuzzRequest(parsing: bytes)
        var extraClaims = JWTClaims()
        if let text = raw.harnessField("X-Fuzz-Claims"), let object = try? JSONValue(parsing: Array(text.utf8)),
            case .object(let members) = object
        {
            for (name, value) in members { extraClaims[name] = value }
        }
        var text = String(decoding: bytes, as: UTF8.self)
        for name in Self.placeholderNames where text.contains("{{\(name)}}") {
            let value = try value(of: name, captures: captures, extraClaims: extraClaims)
            if ["assertion", "approval", "register", "device_approval"].contains(name) { secrets.append(value) }
            text = text.replacing("{{\(name)}}", with: value)
        }
        var request = FuzzRequest(parsing: Array(text.utf8))
        if request.headers.contains(where: { $0.value.contains("{{dpop}}") }) {
            let bound = request.headers.first { $0.name.lowercased() == "authorization" && $0.value.hasPrefix("DPoP ") }
            let proof = try proof(
                method: request.method, path: request.path, accessToken: bound.map { String($0.value.dropFirst(5)) },
                nonce: raw.harnessField("X-Fuzz-Nonce"))
            request.headers = request.headers.map { ($0.name, $0.value.replacing("{{dpop}}", with: proof)) }
        }
        return (request, secrets)
    }

    /// Secrets every request may carry, and none may log.
    private var fixedSecrets: [String] {
        [token, dpopToken, session, sessionCSRF, Self.relyingParty.secret, Self.ciba.secret]
    }

    static let placeholderNames = [
        "issuer", "user", "kid", "pending_kid", "assertion", "approval", "request_id", "request_code",
        "device_approval", "register", "token",
        "dpop_token", "client_id", "client_secret", "basic", "public_client_id", "ciba_client_id", "ciba_basic",
        "redirect_uri", "loopback_redirect", "logout_uri", "pkce_verifier", "pkce_challenge", "session",
        "session_csrf", "csrf", "code", "auth_req_id", "authorization", "cookie", "page_csrf", "id_token",
        "access_token", "nonce",
    ]

    private func value(of name: String, captures: FuzzCaptures, extraClaims: JWTClaims) throws -> String {
        switch name {
        case "issuer": return Self.issuer
        case "user": return Self.user
        case "kid": return keys.device.publicKey.fingerprint
        case "pending_kid": return keys.pending.publicKey.fingerprint
        case "assertion": return try assertion(extra: extraClaims)
        case "approval":
            let id = try requestID(captures)
            var claims = JWTClaims()
            claims.set(AuthenticationMethod.requestClaim, string: id)
            claims.set(AuthenticationMethod.codeClaim, string: try storage.signInRequest(id: id)?.bindingMessage ?? "")
            claims.set("amr", strings: ["swk", "pin"])
            claims.merge(extraClaims)
            return try assertion(extra: claims)
        case "request_id": return try requestID(captures)
        case "request_code": return try storage.signInRequest(id: try requestID(captures))?.bindingMessage ?? ""
        case "device_approval":
            var claims = JWTClaims()
            claims.set(AuthenticationMethod.approvedDeviceClaim, string: keys.pending.publicKey.fingerprint)
            claims.set("amr", strings: ["swk", "pin"])
            claims.merge(extraClaims)
            return try assertion(extra: claims)
        case "register": return try registration(user: "bob", key: keys.stranger)
        case "token": return token
        case "dpop_token": return dpopToken
        case "client_id": return Self.relyingParty.id
        case "client_secret": return Self.relyingParty.secret
        case "basic": return Self.basic(Self.relyingParty.id, Self.relyingParty.secret)
        case "public_client_id": return Self.nativeClient
        case "ciba_client_id": return Self.ciba.id
        case "ciba_basic": return Self.basic(Self.ciba.id, Self.ciba.secret)
        case "redirect_uri": return Self.redirectURI
        case "loopback_redirect": return Self.loopbackRedirect
        case "logout_uri": return Self.logoutURI
        case "pkce_verifier": return pkceVerifier
        case "pkce_challenge": return pkceChallenge
        case "session":
            try restoreSession()
            return session
        case "session_csrf": return sessionCSRF
        case "csrf": return Self.csrf
        case "nonce": return captures.values["nonce"] ?? nonce
        default: return captures.values[name] ?? ""
        }
    }

    private static func basic(_ id: String, _ secret: String) -> String {
        "Basic " + Data("\(id):\(secret)".utf8).base64EncodedString()
    }
}

/// What an input's responses handed out, for its later requests.
struct FuzzCaptures {
    var values: [String: String] = [:]

    mutating func record(_ response: HTTPResponse) {
        if let nonce = response.headers["DPoP-Nonce"] { values["nonce"] = nonce }
        if let location = response.headers["Location"], let query = location.split(separator: "?", maxSplits: 1).last {
            for item in FuzzRequest.queryItems(String(query)) where item.name == "code" { values["code"] = item.value }
        }
        for cookie in response.headers.values(for: "Set-Cookie") {
            let pair = cookie.split(separator: ";").first ?? ""
            if pair.hasPrefix("keyauth-session=") {
                values["cookie"] = String(pair.dropFirst("keyauth-session=".count))
            }
        }
        if let json = try? JSONValue(parsing: response.body) {
            for name in ["access_token", "id_token", "auth_req_id"] {
                if let value = json[name]?.stringValue { values[name] = value }
            }
        } else if response.headers["Content-Type"]?.hasPrefix("text/html") == true {
            let page = String(decoding: response.body, as: UTF8.self)
            for (field, capture) in [("authorization", "authorization"), ("csrf", "page_csrf")] {
                if let value = Self.hiddenField(field, in: page) { values[capture] = value }
            }
        }
    }

    /// The value of `<input ... name="NAME" value="VALUE">` in `page`.
    private static func hiddenField(_ name: String, in page: String) -> String? {
        guard let range = page.range(of: "name=\"\(name)\" value=\"") else { return nil }
        let rest = page[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }
}

/// The harness could not set the server up.
struct FuzzSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
