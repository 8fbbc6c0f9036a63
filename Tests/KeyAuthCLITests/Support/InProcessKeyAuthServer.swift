import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Synchronization
import Testing

/// The real server application (``KeyAuthResponder`` over SQLite in a temporary directory)
/// behind a ``LoopbackHTTPResponder``, so that commands run in-process against the server's own
/// rules over a real socket.
///
/// Open enrollment, a signing key made once per process, and limits that never trip; every
/// request counts as coming from ``clientAddress``, which the server records as
/// `registered_from`. The test reads and changes the server's state through its storage, as an
/// administrator or another device would.
final class InProcessKeyAuthServer: Sendable {
    /// The signing key, shared so that no server generates one.
    private static let signingKey = TestKeys.second

    private let listener: LoopbackHTTPResponder
    private let directory: TemporaryDirectory
    private let storage: any ServerStorage
    private let state: SharedState

    /// What the listener's threads and the test share.
    private final class SharedState: Sendable {
        struct Values {
            var clientAddress = "192.0.2.10"
            var listQueries: [String] = []
            var issuedCursors: [String] = []
        }

        let values = Mutex(Values())
        let application = Mutex<KeyAuthResponder?>(nil)
        let interceptor = Mutex<Interceptor?>(nil)
    }

    /// Decides the answer to a request in place of the plain server: `forward` hands the request
    /// to the server and returns its answer, which the interceptor may replace or drop.
    typealias Interceptor =
        @Sendable (
            LoopbackHTTPResponder.Request, _ forward: () -> LoopbackHTTPResponder.Response
        ) -> LoopbackHTTPResponder.Response

    /// What stands between the socket and the server, to play a proxy or a lost reply; nil
    /// forwards everything.
    var interceptor: Interceptor? {
        get { state.interceptor.withLock { $0 } }
        set { state.interceptor.withLock { $0 = newValue } }
    }

    /// Answers every `method path` request with `answer` from now on, and forwards the others.
    ///
    /// - Parameter serverActsFirst: whether the server handles the request before its answer is
    ///   replaced (a reply lost, or changed, after the server stored what it asked for); otherwise
    ///   the server never sees it (a proxy's refusal).
    func replaceAnswers(
        to method: String, _ path: String, with answer: LoopbackHTTPResponder.Response, serverActsFirst: Bool
    ) {
        interceptor = { request, forward in
            guard request.method == method, request.path == path else { return forward() }
            if serverActsFirst { _ = forward() }
            return answer
        }
    }

    /// The server's URL, also its issuer.
    var url: String { listener.url }

    /// Listens on `host`, 127.0.0.1 unless a test needs an address that is not loopback.
    ///
    /// - Parameters:
    ///   - host: the listening address.
    ///   - sshCAKeyFile: makes the server an SSH user certificate authority with this key file.
    ///   - sshPrincipalsFile: the principals of its certificates besides the user's name.
    init(host: String = "127.0.0.1", sshCAKeyFile: String? = nil, sshPrincipalsFile: String? = nil) throws {
        let directory = TemporaryDirectory("keyauth-inprocess")
        let storage = try StorageFactory.open(directory.path + "/server.db")
        let key = Self.signingKey
        _ = try storage.insertSigningKey(
            kid: key.publicKey.fingerprint, privatePEM: try key.pkcs8PEM(), createdAt: ServerClock.now())
        let state = SharedState()
        listener = try LoopbackHTTPResponder(host: host) { request in
            guard let responder = state.application.withLock({ $0 }) else {
                return .oauthError(503, "temporarily_unavailable", "starting")
            }
            let forward = { Self.forward(request, to: responder, state: state) }
            guard let interceptor = state.interceptor.withLock({ $0 }) else { return forward() }
            return interceptor(request, forward)
        }
        var configuration = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:0"))
        configuration.enrollment = .open
        configuration.logRequests = false
        configuration.failureLimit = 100_000
        configuration.registrationLimit = 100_000
        configuration.sshCAKeyFile = sshCAKeyFile
        configuration.sshPrincipalsFile = sshPrincipalsFile
        do {
            let responder = try KeyAuthResponder(
                configuration: configuration, issuer: listener.url, storage: storage, log: SilentLog())
            state.application.withLock { $0 = responder }
        } catch {
            listener.stop()
            storage.close()
            directory.remove()
            throw error
        }
        self.directory = directory
        self.storage = storage
        self.state = state
    }

    deinit {
        listener.stop()
        storage.close()
        directory.remove()
    }

    /// The SQLite file the server keeps its records in, for `keyauth-server` commands (`--db`).
    var databasePath: String { directory.path + "/server.db" }

    /// Stops listening; the port then refuses connections.
    func stop() {
        listener.stop()
    }

    /// Runs the server's periodic cleanup now (which also reads the SSH CA files again, as after
    /// `keyauth-server ssh-ca rotate`).
    func runCleanup() {
        state.application.withLock { $0 }?.purgeExpired()
    }

    /// Every request received, in order.
    var requests: [LoopbackHTTPResponder.Request] { listener.requests }

    /// How many logins (`POST /oauth/token`) were asked for.
    var loginCount: Int {
        requests.filter { $0.method == "POST" && $0.path == "/oauth/token" }.count
    }

    /// The address requests come from, recorded with new registrations.
    var registrationAddress: String {
        get { state.values.withLock { $0.clientAddress } }
        set { state.values.withLock { $0.clientAddress = newValue } }
    }

    /// The query strings of the device-list requests received.
    var listQueries: [String] { state.values.withLock { $0.listQueries } }

    /// The `next_cursor` values the device list answered with, in order.
    var issuedCursors: [String] { state.values.withLock { $0.issuedCursors } }

    /// The stored state of device `keyID`.
    func status(of keyID: String) -> String? {
        (try? storage.device(kid: keyID))?.status.rawValue
    }

    /// The stored device `keyID`.
    func device(_ keyID: String) throws -> DeviceRecord? {
        try storage.device(kid: keyID)
    }

    /// The key ids of the devices in a stored state.
    func keyIDs(withStatus status: String) -> [String] {
        ((try? storage.allDevices()) ?? []).filter { $0.status.rawValue == status }.map(\.kid)
    }

    /// Sets a device's state as another device or the administrator would.
    func setStatus(_ status: String, of keyID: String) throws {
        guard let target = DeviceStatus.Stored(rawValue: status), let device = try storage.device(kid: keyID),
            try storage.updateStatus(kid: keyID, from: device.status, to: target, at: ServerClock.now())
        else { throw TestFailure("cannot set \(keyID) to \(status)") }
    }

    /// A one-time enrollment code for `user`, as `keyauth-server enroll` prints it.
    func enrollmentCode(for user: String) throws -> String {
        try EnrollmentCodes(storage: storage).issue(for: user)
    }

    /// Adds `count` devices of `user` that never log in, to fill pages of the device list: named
    /// `fake-device-N`, registered from `198.51.100.N`, a second after the devices before them.
    func addDevices(_ count: Int, user: String, status: DeviceStatus.Stored = .active) throws {
        let createdAt = ServerClock.now() + 1
        for index in 0..<count {
            let kid = try Base64URL.encode(CryptoPrimitives.sha256(Array("\(user)-\(index)".utf8)))
            let device = DeviceRecord(
                kid: kid, user: user, name: "fake-device-\(index)",
                publicKeyPEM: TestKeys.first.publicKey.pemRepresentation, status: status, createdAt: createdAt,
                registeredFrom: "198.51.100.\(index % 250)")
            guard try storage.insertDevice(device) else { throw TestFailure("device \(index) exists") }
        }
    }

    /// Registers a client application named `name` (confidential) and returns its credentials.
    func addClient(name: String) throws -> (id: String, secret: String) {
        let (client, secret) = try ClientRegistry(storage: storage).add(name: name)
        return (client.id, try #require(secret))
    }

    /// Starts a sign-in request for `user` as a client application named `application` does
    /// (`POST /bc-authorize`, registering the client first), and returns its `auth_req_id`.
    func startSignInRequest(
        for user: String, application: String = "Test application", form extra: String = ""
    ) throws -> String {
        let (client, secret) = try ClientRegistry(storage: storage).add(name: application)
        let credentials = try #require(secret.map { "\(client.id):\($0)" })
        var headers = HTTPHeaders()
        headers.add("Authorization", "Basic " + Data(credentials.utf8).base64EncodedString())
        headers.add("Content-Type", "application/x-www-form-urlencoded")
        let responder = try #require(state.application.withLock { $0 })
        let response = responder.respond(
            to: HTTPRequest(
                method: "POST", path: "/bc-authorize", headers: headers,
                body: Array(("login_hint=\(user)" + extra).utf8),
                clientAddress: registrationAddress))
        guard response.status == 200, let id = try JSONValue(parsing: response.body)["auth_req_id"]?.stringValue else {
            throw TestFailure(
                "bc-authorize answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
        }
        return id
    }

    /// Hands one request to the real responder, as the transport would.
    private static func forward(
        _ request: LoopbackHTTPResponder.Request, to responder: KeyAuthResponder, state: SharedState
    ) -> LoopbackHTTPResponder.Response {
        let parts = request.path.split(separator: "?", maxSplits: 1).map(String.init)
        let path = parts.first.flatMap { $0.removingPercentEncoding } ?? request.path
        let query = parts.count == 2 ? parts[1] : ""
        var headers = HTTPHeaders()
        for (name, value) in request.headers { headers.add(name, value) }
        let address = state.values.withLock { $0.clientAddress }
        // As libmicrohttpd hands it over: the first value of each name, and the names repeated.
        let parameters = (try? FormURLEncoding.decodeNotingRepeats(Array(query.utf8))) ?? (values: [:], repeated: [])
        let response = responder.respond(
            to: HTTPRequest(
                method: request.method, path: path, query: parameters.values,
                repeatedQueryNames: parameters.repeated, headers: headers, body: request.body, clientAddress: address))
        if request.method == "GET" && path == "/v1/devices" {
            let cursor = (try? JSONValue(parsing: response.body))?["next_cursor"]?.stringValue
            state.values.withLock { values in
                values.listQueries.append(query)
                if let cursor { values.issuedCursors.append(cursor) }
            }
        }
        var fields: [String: String] = [:]
        for field in response.headers { fields[field.name] = field.value }
        return LoopbackHTTPResponder.Response(status: response.status, headers: fields, body: response.body)
    }
}
