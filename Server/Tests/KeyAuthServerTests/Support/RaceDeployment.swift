import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// A deployment that single-use races run against over real sockets: one in-process server on
/// SQLite, or two `keyauth-server` processes of the built binary on one PostgreSQL schema, as
/// behind a load balancer.
struct RaceDeployment: Sendable {
    /// The issuer every instance of the PostgreSQL deployment names.
    static let postgresIssuer = "http://keyauth.test"

    /// A client of each instance, all naming the deployment's one issuer.
    let instances: [TestAPI]
    /// The storage the instances share, opened by the test for what an administrator does
    /// (adding a client) and what a user reads from a screen (a sign-in request's code).
    let storage: any ServerStorage
    /// The clock the test signs with; the servers run on the wall clock, or on this one.
    let clock: TestClock
    /// `--db` of the deployment, for admin commands such as `keyauth-server enroll`.
    let database: String
    /// The server processes, empty for the in-process server.
    let processes: [KeyAuthServerProcess]

    /// The client the racer `index` of a round talks to: alternating, so that on PostgreSQL half
    /// of the racers reach each server.
    func instance(_ index: Int) -> TestAPI {
        instances[index % instances.count]
    }

    /// Moves the test clock to the wall clock, which the server processes run on (the
    /// in-process server runs on the test clock, so it moves too).
    func syncClock() {
        let wall = Int64(Date().timeIntervalSince1970)
        if wall > clock.now { clock.advance(by: wall - clock.now) }
    }

    /// Whether every server still runs and answers `/healthz` with 200.
    func isHealthy() -> Bool {
        processes.allSatisfy(\.isRunning)
            && instances.allSatisfy { (try? $0.send("GET", "/healthz").status) == 200 }
    }

    /// Runs `body` against one in-process server on a fresh SQLite file, with limits that a few
    /// hundred requests from one address do not reach, cheap recovery-code hashing, and a slot to
    /// hash one for each worker thread.
    static func onSQLite(_ body: (RaceDeployment) throws -> Void) throws {
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let runner = try environment.startServer {
            $0.failureLimit = 100_000
            $0.registrationLimit = 100_000
            $0.recoveryCodeIterations = 1000
            $0.threads = 4
            // Every worker may check a recovery code at once, so the racers reach storage together.
            $0.slowHashSlots = 4
        }
        defer { runner.stop() }
        // As `serve` leaves a file it creates, so that admin commands such as `enroll` take it.
        chmod(environment.databasePath, 0o600)
        try withExtendedLifetime(environment) {
            try body(
                RaceDeployment(
                    instances: [environment.socketAPI(runner)], storage: runner.storage, clock: environment.clock,
                    database: environment.databasePath, processes: []))
        }
    }

    /// Runs `body` against two `keyauth-server serve` processes on a fresh schema of
    /// `KEYAUTH_TEST_POSTGRES_URL`, then stops them, expecting a clean exit, and drops the schema.
    static func onPostgres(_ body: (RaceDeployment) throws -> Void) throws {
        try PostgresTestServer.withServerProcesses(issuer: postgresIssuer) { servers, url in
            let storage = try PostgresStorage(url: url)
            let clock = TestClock(Int64(Date().timeIntervalSince1970))
            try body(
                RaceDeployment(
                    instances: servers.map {
                        TestAPI(
                            transport: SocketTransport(port: $0.port), issuer: postgresIssuer, clock: clock,
                            storage: storage)
                    }, storage: storage, clock: clock, database: url, processes: servers))
        }
    }
}

/// What one racer of a round got.
struct RaceAnswer: Sendable, CustomStringConvertible {
    /// The HTTP status; 0 when no answer came (the connection failed or timed out).
    let status: Int
    /// The OAuth `error`, if any.
    let error: String?
    /// The body, or why there was none.
    let text: String

    init(_ response: HTTPResponse) {
        status = response.status
        error = response.errorCode
        text = response.text
    }

    init(failure: any Error) {
        status = 0
        error = nil
        text = "no answer: \(failure)"
    }

    var description: String { "\(status) \(error ?? "")" }
}

/// Races: requests fired by threads that wait for one start signal.
enum Race {
    /// Runs `body` on `count` threads of their own, released together once all are ready
    /// (``runConcurrently(_:_:)``), so that the requests reach the servers as close together as
    /// the machine allows. A request that fails without an answer, or a thread that has not
    /// finished when the wait ends, is an answer of status 0.
    static func run(_ count: Int, _ body: @escaping @Sendable (Int) throws -> HTTPResponse) -> [RaceAnswer] {
        runConcurrently(count) { index throws(StorageError) in
            do {
                return RaceAnswer(try body(index))
            } catch {
                return RaceAnswer(failure: error)
            }
        }.map { outcome in
            switch outcome {
            case .success(let answer): answer
            case .failure(let error): RaceAnswer(failure: error)
            }
        }
    }
}
