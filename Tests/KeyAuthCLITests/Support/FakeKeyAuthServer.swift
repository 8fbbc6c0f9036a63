import Foundation
import KeyAuth
import KeyAuthTestSupport

/// Just enough of the keyauth server, behind a ``LoopbackHTTPResponder``, to run commands
/// in-process: it checks proofs and assertions with the real JWT code, keeps devices in memory,
/// and can be told to answer a path with a canned error.
final class FakeKeyAuthServer: @unchecked Sendable {
    struct Device {
        let key: RSAPublicKey
        let user: String
        let name: String
        var status: String
        var registeredFrom: String? = "192.0.2.10"
    }

    private let lock = NSLock()
    private var devices: [String: Device] = [:]
    /// Key ids in registration order, the order the device list pages through.
    private var order: [String] = []
    /// The address new registrations are recorded as coming from.
    var registrationAddress: String? {
        get { lock.withLock { nextAddress } }
        set { lock.withLock { nextAddress = newValue } }
    }
    private var nextAddress: String? = "192.0.2.10"
    private var tokens: [String: String] = [:]
    private var overrides: [String: LoopbackHTTPResponder.Response] = [:]
    private(set) var tokenRequests = 0
    var tokenLifetime = 900
    private var responder: LoopbackHTTPResponder?

    var url: String { responder.map(\.url) ?? "" }

    /// Listens on `host`, 127.0.0.1 unless a test needs an address that is not loopback.
    init(host: String = "127.0.0.1") throws {
        responder = try LoopbackHTTPResponder(host: host) { [unowned self] request in handle(request) }
    }

    /// Every request received, in order.
    var requests: [LoopbackHTTPResponder.Request] { responder?.requests ?? [] }

    func stop() {
        responder?.stop()
    }

    /// Answers `"METHOD /path"` with `response` from now on.
    func override(_ route: String, with response: LoopbackHTTPResponder.Response?) {
        lock.withLock { overrides[route] = response }
    }

    func status(of keyID: String) -> String? {
        lock.withLock { devices[keyID]?.status }
    }

    var loginCount: Int { lock.withLock { tokenRequests } }

    /// Sets a device's state as another device or an administrator would.
    func setStatus(_ status: String, of keyID: String) {
        lock.withLock { devices[keyID]?.status = status }
    }

    /// The key ids in a given state.
    func keyIDs(withStatus status: String) -> [String] {
        lock.withLock { devices.filter { $0.value.status == status }.map(\.key) }
    }

    /// Adds `count` devices of `user` that never log in, to fill pages of the device list.
    func addDevices(_ count: Int, user: String, status: String = "active") {
        lock.withLock {
            for index in 0..<count {
                let kid =
                    "fake-device-" + String(index) + String(repeating: "x", count: max(0, 31 - String(index).count))
                devices[kid] = Device(
                    key: TestKeys.second.publicKey, user: user, name: "device \(index)", status: status,
                    registeredFrom: "198.51.100.\(index % 250)")
                order.append(kid)
            }
        }
    }

    private var deviceListQueries: [String] = []

    /// The query strings of the device-list requests received.
    var listQueries: [String] { lock.withLock { deviceListQueries } }

    private func handle(_ request: LoopbackHTTPResponder.Request) -> LoopbackHTTPResponder.Response? {
        let route = "\(request.method) \(request.path)"
        if let response = lock.withLock({ overrides[route] }) { return response }
        let issuer = "http://" + (request.headers["host"] ?? "")
        let parts = request.path.split(separator: "?", maxSplits: 1).map(String.init)
        let path = parts.first ?? request.path
        let query = parts.count == 2 ? parts[1] : ""
        switch (request.method, path) {
        case ("GET", "/.well-known/openid-configuration"):
            return .json(200, "{\"issuer\":\"\(issuer)\",\"token_endpoint\":\"\(issuer)/oauth/token\"}")
        case ("POST", "/v1/devices"):
            return register(request, issuer: issuer)
        case ("POST", "/oauth/token"):
            return token(request, issuer: issuer)
        case ("GET", "/v1/devices"):
            guard let user = bearerUser(request) else { return .oauthError(401, "invalid_token", "bad token") }
            return listPage(user: user, query: query)
        default:
            return manage(request)
        }
    }

    /// One page of the device list as PROTOCOL.md section 4 has it: `limit` (at most 100),
    /// an opaque `cursor`, and `next_cursor` only while devices remain.
    private func listPage(user: String, query: String) -> LoopbackHTTPResponder.Response {
        var parameters: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let items = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if items.count == 2 { parameters[items[0]] = items[1].removingPercentEncoding }
        }
        let limit = min(100, max(1, Int(parameters["limit"] ?? "") ?? 100))
        let start = parameters["cursor"].flatMap { $0.hasPrefix("after:") ? Int($0.dropFirst(6)) : nil } ?? 0
        return lock.withLock {
            deviceListQueries.append(query)
            let mine = order.filter { devices[$0]?.user == user }
            let page = mine.dropFirst(start).prefix(limit)
            let entries = page.compactMap { kid in devices[kid].map { entry(kid: kid, device: $0) } }
            let next = start + page.count < mine.count ? ",\"next_cursor\":\"after:\(start + page.count)\"" : ""
            return .json(200, "{\"devices\":[\(entries.joined(separator: ","))]\(next)}")
        }
    }

    private func entry(kid: String, device: Device) -> String {
        let address = device.registeredFrom.map { "\"\($0)\"" } ?? "null"
        return "{\"kid\":\"\(kid)\",\"user\":\"\(device.user)\",\"name\":\"\(device.name)\","
            + "\"status\":\"\(device.status)\",\"created_at\":\"2025-01-01T00:00:00Z\",\"last_login_at\":null,"
            + "\"registered_from\":\(address)}"
    }

    private func register(_ request: LoopbackHTTPResponder.Request, issuer: String) -> LoopbackHTTPResponder.Response {
        guard let body = try? JSONValue(parsing: request.body), let user = body["user"]?.stringValue,
            let pem = body["public_key"]?.stringValue, let name = body["name"]?.stringValue,
            let proof = body["proof"]?.stringValue, let key = try? RSAPublicKey(pemRepresentation: Array(pem.utf8)),
            let jws = try? CompactJWS(parsing: proof), jws.isSignatureValid(with: key),
            (try? jws.claims())?["aud"]?.stringValue == issuer
        else { return .oauthError(400, "invalid_request", "bad registration") }
        let kid = key.fingerprint
        let hasActive = lock.withLock { devices.values.contains { $0.user == user && $0.status == "active" } }
        let status = !hasActive || body["enrollment_code"]?.stringValue == "good-code" ? "active" : "pending"
        lock.withLock {
            if devices[kid] == nil { order.append(kid) }
            devices[kid] = Device(key: key, user: user, name: name, status: status, registeredFrom: nextAddress)
        }
        return .json(
            status == "active" ? 201 : 202,
            "{\"kid\":\"\(kid)\",\"user\":\"\(user)\",\"name\":\"\(name)\",\"status\":\"\(status)\"}")
    }

    private func token(_ request: LoopbackHTTPResponder.Request, issuer: String) -> LoopbackHTTPResponder.Response {
        lock.withLock { tokenRequests += 1 }
        var form: [String: String] = [:]
        for pair in request.bodyText.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { form[parts[0]] = parts[1].removingPercentEncoding }
        }
        guard form["grant_type"] == OAuthGrantType.jwtBearer.rawValue else {
            return .oauthError(400, "unsupported_grant_type", "grant")
        }
        guard let assertion = form["assertion"], let jws = try? CompactJWS(parsing: assertion),
            let kid = jws.keyID, let device = lock.withLock({ devices[kid] }), jws.isSignatureValid(with: device.key),
            (try? jws.claims())?["aud"]?.stringValue == issuer
        else { return .oauthError(400, "invalid_grant", "the assertion is not valid") }
        switch device.status {
        case "active":
            let value = "eyJhbGciOiJSUzI1NiJ9.\(Base64URL.encode(Array(UUID().uuidString.utf8))).c2lnbmF0dXJl"
            lock.withLock { tokens[value] = device.user }
            return .json(
                200, "{\"access_token\":\"\(value)\",\"token_type\":\"Bearer\",\"expires_in\":\(tokenLifetime)}",
                headers: ["Cache-Control": "no-store"])
        case "pending": return .oauthError(400, "authorization_pending", "waiting for approval")
        case "denied": return .oauthError(400, "access_denied", "denied")
        default: return .oauthError(400, "invalid_grant", "the assertion is not valid")
        }
    }

    private func manage(_ request: LoopbackHTTPResponder.Request) -> LoopbackHTTPResponder.Response {
        let parts = request.path.split(separator: "/").map(String.init)
        guard parts.count >= 3, parts[0] == "v1", parts[1] == "devices" else {
            return .oauthError(404, "not_found", "no such path")
        }
        guard let user = bearerUser(request) else { return .oauthError(401, "invalid_token", "bad token") }
        let kid = parts[2]
        return lock.withLock {
            guard let device = devices[kid], device.user == user else {
                return .oauthError(404, "not_found", "no such device")
            }
            if request.method == "POST", parts.count == 4, parts[3] == "approve", device.status == "pending" {
                devices[kid]?.status = "active"
                return .json(200, devices[kid].map { entry(kid: kid, device: $0) } ?? "{}")
            }
            if request.method == "DELETE", parts.count == 3 {
                devices[kid]?.status = device.status == "pending" ? "denied" : "revoked"
                return LoopbackHTTPResponder.Response(status: 204)
            }
            return .oauthError(400, "invalid_request", "cannot do that")
        }
    }

    private func bearerUser(_ request: LoopbackHTTPResponder.Request) -> String? {
        guard let header = request.headers["authorization"], header.hasPrefix("Bearer ") else { return nil }
        return lock.withLock { tokens[String(header.dropFirst(7))] }
    }
}
