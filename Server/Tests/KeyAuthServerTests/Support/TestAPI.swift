import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport

/// The protocol's requests, built the way a client would build them, plus hostile variants.
struct TestAPI: Sendable {
    let transport: any TestTransport
    let issuer: String
    let clock: TestClock
    let storage: any ServerStorage
    /// The client address direct requests claim to come from.
    var clientAddress = "192.0.2.1"

    static let jwtBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

    // MARK: Assertions

    /// A device assertion of `key` for this server, with claims overridden or (with `.null`)
    /// removed.
    func assertion(
        _ key: RSAPrivateKey, claims: [String: JSONValue] = [:], lifetime: Int64 = 30, type: String = "JWT",
        keyID: String? = nil
    ) throws -> String {
        let builder = JWTBuilder(key: key, audience: issuer, lifetime: lifetime, clock: clock.clock)
        var payload = try defaultClaims(builder)
        for (name, value) in claims {
            payload[name] = value == .null ? nil : value
        }
        let header: JSONValue = .object([
            "alg": "RS256", "typ": .string(type), "kid": .string(keyID ?? key.publicKey.fingerprint),
        ])
        return try signed(header: header, payload: .object(payload), key: key)
    }

    /// A compact JWS of exactly this header and payload, signed with RS256 by `key`.
    func signed(header: JSONValue, payload: JSONValue, key: RSAPrivateKey) throws -> String {
        try JWTBuilder.sign(
            headerJSON: Array(header.serialized().utf8), payloadJSON: Array(payload.serialized().utf8), key: key)
    }

    /// The default claims of an assertion by `key`.
    func defaultClaims(_ key: RSAPrivateKey) throws -> [String: JSONValue] {
        try defaultClaims(JWTBuilder(key: key, audience: issuer, clock: clock.clock))
    }

    private func defaultClaims(_ builder: JWTBuilder) throws -> [String: JSONValue] {
        try builder.defaultClaims().jsonValue.objectValue ?? [:]
    }

    // MARK: Requests

    func send(
        _ method: String, _ path: String, query: [String: String] = [:], headers: HTTPHeaders = HTTPHeaders(),
        body: [UInt8] = []
    ) throws -> HTTPResponse {
        try transport.send(
            HTTPRequest(
                method: method, path: path, query: query, headers: headers, body: body, clientAddress: clientAddress))
    }

    /// `POST /v1/devices` with a JSON body.
    func registerBody(_ body: JSONValue, headers: HTTPHeaders = ["Content-Type": "application/json"]) throws
        -> HTTPResponse
    {
        try send("POST", "/v1/devices", headers: headers, body: Array(body.serialized().utf8))
    }

    /// Registers `key` for `user`, with a valid proof unless one is given.
    func register(
        user: String, key: RSAPrivateKey, name: String = "test-device", code: String? = nil, proof: String? = nil,
        publicKeyPEM: String? = nil, keyProtection: String? = "pin"
    ) throws -> HTTPResponse {
        var body: [String: JSONValue] = [
            "user": .string(user), "name": .string(name),
            "public_key": .string(publicKeyPEM ?? key.publicKey.pemRepresentation),
            "proof": .string(try proof ?? assertion(key)),
        ]
        if let code { body["enrollment_code"] = .string(code) }
        // As the keyauth command states it for a key with a PIN; nil states nothing.
        if let keyProtection { body["key_protection"] = .string(keyProtection) }
        return try registerBody(.object(body))
    }

    /// `POST /oauth/token` with a form body.
    func token(form: String, contentType: String = "application/x-www-form-urlencoded") throws -> HTTPResponse {
        try send("POST", "/oauth/token", headers: ["Content-Type": contentType], body: Array(form.utf8))
    }

    /// Logs in with `assertion`.
    func login(assertion: String) throws -> HTTPResponse {
        try token(form: "grant_type=\(Self.formEncode(Self.jwtBearer))&assertion=\(Self.formEncode(assertion))")
    }

    /// Logs in with a fresh assertion of `key`.
    func login(_ key: RSAPrivateKey) throws -> HTTPResponse {
        try login(assertion: try assertion(key))
    }

    /// An access token for `key`'s device, which must be active.
    func accessToken(_ key: RSAPrivateKey) throws -> String {
        let response = try login(key)
        guard response.status == 200, let token = response.json?["access_token"]?.stringValue else {
            throw TestFailure("login failed: \(response.status) \(response.text)")
        }
        return token
    }

    /// A request with a Bearer token.
    func authorized(
        _ method: String, _ path: String, query: [String: String] = [:], token: String?
    ) throws -> HTTPResponse {
        var headers = HTTPHeaders()
        if let token { headers.add("Authorization", "Bearer \(token)") }
        return try send(method, path, query: query, headers: headers)
    }

    /// Registers `key` as the active first device of `user` and returns an access token.
    func activeDevice(user: String, key: RSAPrivateKey) throws -> String {
        let response = try register(user: user, key: key)
        guard response.status == 201 else {
            throw TestFailure("registration failed: \(response.status) \(response.text)")
        }
        return try accessToken(key)
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters.
    static func formEncode(_ text: String) -> String {
        var output = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += String(format: "%%%02X", byte)
            }
        }
        return output
    }
}

extension TestAPI {
    /// Requests over a socket to a server process, which is their issuer.
    init(server: KeyAuthServerProcess, clock: TestClock, storage: any ServerStorage) {
        self.init(
            transport: SocketTransport(port: server.port), issuer: server.url, clock: clock, storage: storage)
    }
}
