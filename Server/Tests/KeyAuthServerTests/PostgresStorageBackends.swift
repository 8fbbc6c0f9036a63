import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// A kind of ``ServerStorage`` the storage contract runs against.
///
/// Each backend creates empty databases; any number of storage instances can open the same
/// database, which is how the tests stand in for several servers behind a load balancer.
struct StorageBackend: Sendable, CustomTestStringConvertible {
    let name: String
    let makeDatabase: @Sendable () throws -> TestDatabase

    var testDescription: String { name }

    /// A temporary SQLite file per database.
    static let sqlite = StorageBackend(name: "SQLite") {
        let directory = TemporaryDirectory("keyauth-storage")
        let path = directory.path + "/keyauth.db"
        return TestDatabase(
            open: { () throws(StorageError) in try SQLiteStorage(path: path) },
            execute: { sql in
                try SQLiteConnection(path: path, busyTimeoutMilliseconds: 5000).execute(sql)
            },
            destroy: { directory.remove() })
    }

    /// A fresh schema per database in the server `KEYAUTH_TEST_POSTGRES_URL` names, or nil when
    /// the variable is unset (the PostgreSQL tests are then reported as skipped).
    static let postgres: StorageBackend? = PostgresTestServer.url.map { url in
        StorageBackend(name: "PostgreSQL") { try PostgresTestServer.makeDatabase(url: url) }
    }
}

/// One empty database and the means to open storage instances on it.
struct TestDatabase: Sendable {
    /// The PostgreSQL URL that reaches this database; nil for SQLite.
    var url: String? = nil
    /// Opens a new storage instance, as a new server process would.
    let open: @Sendable () throws(StorageError) -> any ServerStorage
    /// Runs SQL directly, to arrange states the protocol cannot reach (a newer schema).
    let execute: @Sendable (String) throws -> Void
    /// Removes the database.
    let destroy: @Sendable () -> Void
}

/// The PostgreSQL server the tests use, from `.ci/postgres.sh`.
enum PostgresTestServer {
    /// `KEYAUTH_TEST_POSTGRES_URL`.
    static let url: String? = environment("KEYAUTH_TEST_POSTGRES_URL")

    /// `KEYAUTH_TEST_POSTGRES_CTL`: a command that takes `stop` or `start`
    /// (`pg_ctlcluster 15 keyauth`), for the outage test.
    static let controlCommand: String? = environment("KEYAUTH_TEST_POSTGRES_CTL")

    private static func environment(_ name: String) -> String? {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else { return nil }
        return value
    }

    /// Creates a schema of its own, so that every database starts empty and tests never see
    /// each other's rows, and a URL whose connections use it (`search_path`) and carry a unique
    /// `application_name`, by which a test can find their server processes.
    static func makeDatabase(url: String) throws -> TestDatabase {
        let schema = "keyauth_test_" + UUID().uuidString.lowercased().replacing("-", with: "")
        try adminExecute(url: url, "CREATE SCHEMA \(schema)")
        let schemaURL =
            url + (url.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)&application_name=\(schema)"
        return TestDatabase(
            url: schemaURL,
            open: { () throws(StorageError) in try PostgresStorage(url: schemaURL) },
            execute: { sql in try adminExecute(url: schemaURL, sql) },
            destroy: { try? adminExecute(url: url, "DROP SCHEMA \(schema) CASCADE") })
    }

    /// Runs `sql` on a connection of its own.
    static func adminExecute(url: String, _ sql: String) throws {
        let connection = try PostgresConnection(PostgresLocation(url))
        guard connection.isOpen else {
            throw StorageError(.unavailable, "cannot connect for test setup", underlying: connection.nativeError)
        }
        try connection.execute(sql)
    }

    /// Runs `KEYAUTH_TEST_POSTGRES_CTL action` and waits for it.
    static func control(_ action: String) throws {
        guard let controlCommand else { return }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "\(controlCommand) \(action)"]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw StorageError(.unavailable, "`\(controlCommand) \(action)` exited with \(process.terminationStatus)")
        }
    }

    /// Whether the server accepts connections, checked without any storage instance.
    static func isAccepting(url: String) -> Bool {
        (try? PostgresConnection(PostgresLocation(url)).isOpen) ?? false
    }
}

/// Runs `body` on `count` threads released at the same moment, and returns each thread's
/// outcome in index order.
///
/// Real threads rather than `concurrentPerform`, which on a two-core machine runs only two at
/// a time: the point is many callers inside the store at once, as the server's worker threads are.
func runConcurrently<Value: Sendable>(
    _ count: Int, _ body: @escaping @Sendable (Int) throws(StorageError) -> Value
) -> [Result<Value, StorageError>] {
    let outcomes = Mutex<[Int: Result<Value, StorageError>]>([:])
    let ready = DispatchGroup()
    let finished = DispatchGroup()
    let start = DispatchSemaphore(value: 0)
    for index in 0..<count {
        ready.enter()
        finished.enter()
        let thread = Thread {
            ready.leave()
            start.wait()
            let outcome = Result { () throws(StorageError) in try body(index) }
            outcomes.withLock { $0[index] = outcome }
            finished.leave()
        }
        thread.start()
    }
    ready.wait()
    for _ in 0..<count { start.signal() }
    finished.wait()
    return outcomes.withLock { outcomes in
        (0..<count).map { outcomes[$0] ?? .failure(StorageError(.queryFailed, "thread \($0) reported nothing")) }
    }
}
