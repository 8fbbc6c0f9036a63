import KeyAuth
import KeyAuthServer

/// One row of the error table of PROTOCOL.md section 6, with a scenario that provokes it.
enum ErrorTableRow: String, CaseIterable, Sendable, CustomStringConvertible {
    case invalidRequest
    case unsupportedGrantType
    case invalidGrant
    case authorizationPending
    case accessDeniedDevice
    case expiredToken
    case invalidToken
    case accessDeniedEnrollment
    case notFound
    case methodNotAllowed
    case keyConflict
    case payloadTooLarge
    case slowDown
    case serverError
    case temporarilyUnavailable

    var description: String { rawValue }

    /// The status and `error` code the row prescribes.
    var expected: (status: Int, code: String) {
        switch self {
        case .invalidRequest: (400, "invalid_request")
        case .unsupportedGrantType: (400, "unsupported_grant_type")
        case .invalidGrant: (400, "invalid_grant")
        case .authorizationPending: (400, "authorization_pending")
        case .accessDeniedDevice: (400, "access_denied")
        case .expiredToken: (400, "expired_token")
        case .invalidToken: (401, "invalid_token")
        case .accessDeniedEnrollment: (403, "access_denied")
        case .notFound: (404, "not_found")
        case .methodNotAllowed: (405, "method_not_allowed")
        case .keyConflict: (409, "invalid_request")
        case .payloadTooLarge: (413, "invalid_request")
        case .slowDown: (429, "slow_down")
        case .serverError: (500, "server_error")
        case .temporarilyUnavailable: (503, "temporarily_unavailable")
        }
    }

    /// Server settings the scenario needs.
    func configure(_ configuration: inout ServerConfiguration) {
        switch self {
        case .accessDeniedEnrollment: configuration.enrollment = .code
        case .slowDown: configuration.failureLimit = 1
        default: break
        }
    }

    /// Runs the scenario and returns the response that must match the row.
    func provoke(_ api: TestAPI) throws -> HTTPResponse {
        let alice = try ServerTestKeys.key("alice-1")
        let phone = try ServerTestKeys.key("alice-2")
        switch self {
        case .invalidRequest:
            return try api.send(
                "POST", "/v1/devices", headers: ["Content-Type": "application/json"], body: Array("{".utf8))
        case .unsupportedGrantType:
            return try api.token(form: "grant_type=password")
        case .invalidGrant:
            return try api.login(ServerTestKeys.key("stranger"))
        case .authorizationPending, .accessDeniedDevice, .expiredToken:
            let token = try api.activeDevice(user: "alice", key: alice)
            _ = try api.register(user: "alice", key: phone)
            if self == .accessDeniedDevice {
                _ = try api.authorized("DELETE", "/v1/devices/\(phone.publicKey.fingerprint)", token: token)
            }
            if self == .expiredToken { api.clock.advance(by: 601) }
            return try api.login(phone)
        case .invalidToken:
            return try api.authorized("GET", "/v1/devices", token: "bad")
        case .accessDeniedEnrollment:
            return try api.register(user: "alice", key: alice)
        case .notFound:
            return try api.send("GET", "/no/such/path")
        case .methodNotAllowed:
            return try api.send("DELETE", "/oauth/token")
        case .keyConflict:
            _ = try api.register(user: "alice", key: alice)
            return try api.register(user: "bob", key: alice)
        case .payloadTooLarge:
            return try api.send(
                "POST", "/v1/devices", headers: ["Content-Type": "application/json"],
                body: [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024 + 1))
        case .slowDown:
            _ = try api.token(form: "grant_type=password")
            return try api.token(form: "grant_type=password")
        case .serverError:
            _ = try api.storage.insertDevice(
                DeviceRecord(
                    kid: alice.publicKey.fingerprint, user: "alice", name: "broken", publicKeyPEM: "not a key",
                    status: .active, createdAt: api.clock.now))
            return try api.login(alice)
        case .temporarilyUnavailable:
            api.storage.close()
            return try api.send("GET", "/healthz")
        }
    }
}
