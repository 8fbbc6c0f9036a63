import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// What the token-confusion audit runs against: `keyauth-server serve` processes of the built
/// binary over their sockets, with alice's two active devices and a pending third, and the
/// laptop's and the phone's access tokens.
///
/// On SQLite one process on a file of its own. On PostgreSQL two processes on one fresh schema,
/// as two instances of one deployment behind a load balancer: the test's devices and clients
/// talk to ``api`` (instance A), and the tokens, codes and proofs A gives are offered to
/// ``peer`` (instance B), where a client's next request may land. On SQLite ``peer`` is ``api``.
struct ConfusionDeployment {
    /// Where the servers keep their state.
    enum Database: String, Sendable, CustomTestStringConvertible {
        case sqlite = "SQLite"
        case postgres = "PostgreSQL"

        var testDescription: String { rawValue }
    }

    /// The issuer both PostgreSQL instances name, as every instance of a deployment must.
    static let postgresIssuer = "http://keyauth.test"

    let environment: TestEnvironment
    /// The servers' `--db`, for admin commands (`keys rotate`).
    let database: String
    let storage: any ServerStorage
    /// The instance the test's devices and clients talk to, which issues the tokens.
    let api: TestAPI
    /// The instance tokens are offered to: B on PostgreSQL, A itself on SQLite.
    let peer: TestAPI
    let laptop: RSAPrivateKey
    let phone: RSAPrivateKey
    let pendingKID: String
    let laptopToken: String
    let phoneToken: String

    /// Runs `body` against a deployment on `database`, then stops its servers.
    ///
    /// - Parameters:
    ///   - issuer: the PostgreSQL instances' `--issuer` (a second deployment names another); a
    ///     SQLite server is its own URL's issuer.
    ///   - tokenAlgorithm: `--token-alg`.
    ///   - extraArguments: more `serve` options (`--signing-key-file`).
    static func run(
        on database: Database, issuer: String = postgresIssuer, tokenAlgorithm: String = "RS256",
        extraArguments: [String] = [], _ body: (ConfusionDeployment) throws -> Void
    ) throws {
        let arguments = ["--metrics-listen", "off", "--token-alg", tokenAlgorithm] + extraArguments
        switch database {
        case .sqlite:
            let environment = TestEnvironment(clockStart: ServerClock.now())
            let server = try KeyAuthServerProcess(
                name: "confusion",
                arguments: [
                    "serve", "--listen", "127.0.0.1:0", "--db", environment.databasePath, "--enrollment", "open",
                    "--quiet", "--rate-limit", "100000", "--registration-limit", "100000", "--signing-key-bits", "2048",
                ] + arguments, logPath: environment.directory.path + "/server.log")
            defer { _ = server.terminate() }
            try server.waitUntilListening()
            let storage = try StorageFactory.open(environment.databasePath, creatingIfMissing: false)
            defer { storage.close() }
            let api = TestAPI(server: server, clock: environment.clock, storage: storage)
            try body(
                try ConfusionDeployment(
                    environment: environment, database: environment.databasePath, api: api, peer: api,
                    logs: [server]))
        case .postgres:
            try PostgresTestServer.withServerProcesses(issuer: issuer, extraArguments: arguments) { servers, url in
                let storage = try PostgresStorage(url: url)
                defer { storage.close() }
                // After the servers started: assertions are signed at the test clock's time.
                let environment = TestEnvironment(clockStart: ServerClock.now())
                let instances = servers.map {
                    TestAPI(
                        transport: SocketTransport(port: $0.port), issuer: issuer, clock: environment.clock,
                        storage: storage)
                }
                try body(
                    try ConfusionDeployment(
                        environment: environment, database: url, api: instances[0], peer: instances[1],
                        logs: servers))
            }
        }
    }

    private init(
        environment: TestEnvironment, database: String, api: TestAPI, peer: TestAPI, logs: [KeyAuthServerProcess]
    ) throws {
        self.environment = environment
        self.database = database
        self.api = api
        self.peer = peer
        storage = api.storage
        laptop = try ServerTestKeys.key("alice-1")
        phone = try ServerTestKeys.key("alice-2")
        laptopToken = try api.activeDevice(user: "alice", key: laptop)
        guard try api.register(user: "alice", key: phone).status == 202,
            try api.approveDevice(phone.publicKey.fingerprint, approver: laptop, token: laptopToken).status == 200
        else { throw TestFailure("alice's phone is not active: \(logs.map(\.log))") }
        phoneToken = try api.accessToken(phone)
        let third = try ServerTestKeys.key("alice-3")
        guard try api.register(user: "alice", key: third).status == 202 else {
            throw TestFailure("alice's third device is not pending")
        }
        pendingKID = third.publicKey.fingerprint
    }

    /// Moves the test clock to the wall clock, which the server processes run on.
    func syncClock() {
        let wall = ServerClock.now()
        if wall > environment.clock.now { environment.clock.advance(by: wall - environment.clock.now) }
    }

    /// A DPoP proof of `key` for `method` and `path` of this deployment, for `token` when given.
    func proof(_ key: RSAPrivateKey, _ method: String, _ path: String, token: String? = nil) throws -> String {
        try DPoPProofBuilder(key: key).proof(method: method, url: api.issuer + path, accessToken: token)
    }

    /// The laptop's DPoP-bound access token, from ``api``.
    func boundToken() throws -> String {
        let response = try api.send(
            "POST", "/oauth/token",
            headers: [
                "Content-Type": "application/x-www-form-urlencoded",
                "DPoP": try proof(laptop, "POST", "/oauth/token"),
            ],
            body: Array(
                "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try api.assertion(laptop)))"
                    .utf8))
        guard response.status == 200, response.json?["token_type"] == "DPoP",
            let token = response.json?["access_token"]?.stringValue
        else { throw TestFailure("no DPoP-bound token: \(response.status) \(response.text)") }
        return token
    }

    /// `GET /v1/devices` at ``peer`` with `authorization` and an optional proof.
    func devices(_ authorization: String, proof: String? = nil) throws -> HTTPResponse {
        var headers: HTTPHeaders = ["Authorization": authorization]
        if let proof { headers.add("DPoP", proof) }
        return try peer.send("GET", "/v1/devices", headers: headers)
    }
}
