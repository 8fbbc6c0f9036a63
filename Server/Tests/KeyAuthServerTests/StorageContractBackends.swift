import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// A kind of ``ServerStorage`` the storage contract runs against.
///
/// Each backend creates empty databases; any number of storage instances can open the same
/// database, which is how the tests stand in for several servers behind a load balancer.
struct StorageContractBackend: Sendable, CustomTestStringConvertible {
    let name: String
    let makeDatabase: @Sendable () throws -> StorageContractDatabase

    var testDescription: String { name }

    /// A temporary SQLite file per database.
    static let sqlite = StorageContractBackend(name: "SQLite") {
        let directory = TemporaryDirectory("keyauth-storage")
        let path = directory.path + "/keyauth.db"
        return StorageContractDatabase(
            firstMigration: SQLSchema.migrations[0].statements(.sqlite), userColumn: "user",
            versionTwoSchema: sqliteVersionTwoSchema, hexBlob: { "X'\($0)'" },
            open: { () throws(StorageError) in try SQLiteStorage(path: path) },
            connect: { try SQLiteConnection(path: path, busyTimeoutMilliseconds: 5000) },
            destroy: { directory.remove() })
    }

    /// SQLite's schema version 2 (`SQLiteSchema.swift` before schema version 3).
    static let sqliteVersionTwoSchema = [
        """
        CREATE TABLE devices (
            kid TEXT PRIMARY KEY NOT NULL,
            user TEXT NOT NULL,
            name TEXT NOT NULL,
            public_key_pem TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'denied', 'revoked')),
            created_at INTEGER NOT NULL,
            approved_at INTEGER,
            revoked_at INTEGER,
            last_login_at INTEGER
        )
        """,
        "CREATE INDEX devices_by_user ON devices (user, created_at)",
        """
        CREATE TABLE used_jtis (
            key_id TEXT NOT NULL,
            jti TEXT NOT NULL,
            expires_at INTEGER NOT NULL,
            PRIMARY KEY (key_id, jti)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX used_jtis_by_expiry ON used_jtis (expires_at)",
        """
        CREATE TABLE enrollment_codes (
            code_hash BLOB PRIMARY KEY NOT NULL,
            user TEXT NOT NULL,
            expires_at INTEGER NOT NULL,
            used_at INTEGER
        )
        """,
        """
        CREATE TABLE signing_keys (
            kid TEXT PRIMARY KEY NOT NULL,
            private_pem BLOB NOT NULL,
            created_at INTEGER NOT NULL
        )
        """,
        "ALTER TABLE devices ADD COLUMN registered_from TEXT",
        "CREATE INDEX devices_by_status ON devices (status, created_at)",
    ]

    /// PostgreSQL's schema version 2 (`PostgresSchema.swift` before schema version 3).
    static let postgresVersionTwoSchema = [
        """
        CREATE TABLE devices (
            kid TEXT COLLATE "C" PRIMARY KEY,
            user_name TEXT COLLATE "C" NOT NULL,
            name TEXT NOT NULL,
            public_key_pem TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'denied', 'revoked')),
            created_at BIGINT NOT NULL,
            approved_at BIGINT,
            revoked_at BIGINT,
            last_login_at BIGINT
        )
        """,
        "CREATE INDEX devices_by_user ON devices (user_name, created_at)",
        """
        CREATE TABLE used_jtis (
            key_id TEXT NOT NULL,
            jti TEXT NOT NULL,
            expires_at BIGINT NOT NULL,
            PRIMARY KEY (key_id, jti)
        )
        """,
        "CREATE INDEX used_jtis_by_expiry ON used_jtis (expires_at)",
        """
        CREATE TABLE enrollment_codes (
            code_hash BYTEA PRIMARY KEY,
            user_name TEXT NOT NULL,
            expires_at BIGINT NOT NULL,
            used_at BIGINT
        )
        """,
        """
        CREATE TABLE signing_keys (
            kid TEXT COLLATE "C" PRIMARY KEY,
            private_pem BYTEA NOT NULL,
            created_at BIGINT NOT NULL
        )
        """,
        "ALTER TABLE devices ADD COLUMN registered_from TEXT",
        "CREATE INDEX devices_by_status ON devices (status, created_at)",
    ]

    /// A fresh schema per database in the server `KEYAUTH_TEST_POSTGRES_URL` names, or nil when
    /// the variable is unset (the PostgreSQL tests are then reported as skipped).
    static let postgres: StorageContractBackend? = PostgresTestServer.url.map { url in
        StorageContractBackend(name: "PostgreSQL") { try PostgresTestServer.makeDatabase(url: url) }
    }
}

/// One empty database and the means to open storage instances on it.
struct StorageContractDatabase: Sendable {
    /// The PostgreSQL URL that reaches this database; nil for SQLite.
    var url: String? = nil
    /// The statements of the backend's schema version 1, to build a database as an older
    /// server left it.
    let firstMigration: [String]
    /// What the backend called the devices' user column before version 3 (`user` is reserved
    /// in PostgreSQL).
    let userColumn: String
    /// The backend's whole schema at version 2, as the release before the unified storage
    /// wrote it, kept here verbatim rather than taken from the migration list.
    let versionTwoSchema: [String]
    /// A literal of the byte string with these hex digits, in the backend's SQL.
    let hexBlob: @Sendable (String) -> String
    /// Opens a new storage instance, as a new server process would.
    let open: @Sendable () throws(StorageError) -> any ServerStorage
    /// A connection of the backend's driver, outside any storage instance.
    let connect: @Sendable () throws -> any SQLConnection
    /// Removes the database.
    let destroy: @Sendable () -> Void

    /// Runs SQL directly, to arrange states the protocol cannot reach (a newer schema).
    func execute(_ sql: String) throws {
        try connect().execute(sql)
    }
}

/// The PostgreSQL server the tests use, from `.ci/postgres.sh`.
enum PostgresTestServer {
    /// `KEYAUTH_TEST_POSTGRES_URL`.
    static let url: String? = environment("KEYAUTH_TEST_POSTGRES_URL")

    /// `url` with another password in its user information, or nil when it has none.
    static func replacingPassword(in url: String, with password: String) -> String? {
        guard let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@") else {
            return nil
        }
        let userInfo = url[scheme.upperBound..<at]
        let user = userInfo.split(separator: ":", maxSplits: 1).first ?? userInfo
        return url[..<scheme.upperBound] + user + ":" + password + url[at...]
    }

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
    static func makeDatabase(url: String) throws -> StorageContractDatabase {
        let schema = "keyauth_test_" + UUID().uuidString.lowercased().replacing("-", with: "")
        try adminExecute(url: url, "CREATE SCHEMA \(schema)")
        let schemaURL =
            url + (url.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)&application_name=\(schema)"
        return StorageContractDatabase(
            url: schemaURL, firstMigration: SQLSchema.migrations[0].statements(.postgres), userColumn: "user_name",
            versionTwoSchema: StorageContractBackend.postgresVersionTwoSchema, hexBlob: { "decode('\($0)', 'hex')" },
            open: { () throws(StorageError) in try PostgresStorage(url: schemaURL) },
            connect: { try connect(url: schemaURL) },
            destroy: { try? adminExecute(url: url, "DROP SCHEMA \(schema) CASCADE") })
    }

    /// A connection of its own to `url`, with a `connect_timeout` of 20 s instead of the
    /// server's 3: setup is not what a test measures, and under a full suite's load (browsers,
    /// Apache, swtpm beside it on two cores) a connection was once seen to take longer than 3 s.
    static func connect(url: String) throws -> PostgresConnection {
        let patient =
            url.contains("connect_timeout=") ? url : url + (url.contains("?") ? "&" : "?") + "connect_timeout=20"
        let connection = try PostgresConnection(PostgresLocation(patient))
        guard connection.isOpen else {
            throw StorageError(.unavailable, "cannot connect for test setup", underlying: connection.nativeError)
        }
        return connection
    }

    /// Runs `sql` on a connection of its own.
    static func adminExecute(url: String, _ sql: String) throws {
        try connect(url: url).execute(sql)
    }

    /// Runs `KEYAUTH_TEST_POSTGRES_CTL action` and waits for it, at most two minutes.
    ///
    /// As a ``ChildProcess``: through Foundation's `Process`, `waitUntilExit` was seen never to
    /// return after `pg_ctlcluster start` (the child exited, unreaped), and the database server
    /// the command leaves running must not inherit the test runner's descriptors. Its standard
    /// streams go to /dev/null for the same reason.
    static func control(_ action: String) throws {
        guard let controlCommand else { return }
        let run = try ChildProcess.run(
            "/bin/sh", ["-c", "exec </dev/null >/dev/null 2>&1; \(controlCommand) \(action)"],
            environment: ProcessInfo.processInfo.environment, timeout: 120)
        guard run.termination == .exited(0) else {
            throw StorageError(.unavailable, "`\(controlCommand) \(action)` failed (\(run.termination))")
        }
    }

    /// Whether the server accepts connections, checked without any storage instance.
    static func isAccepting(url: String) -> Bool {
        (try? PostgresConnection(PostgresLocation(url)).isOpen) ?? false
    }
}

/// Runs `body` on `count` threads released at the same moment, and returns each thread's
/// outcome in index order; a thread still running after `timeout` seconds (a store that hangs)
/// counts as a failure instead of hanging the test.
///
/// Real threads rather than `concurrentPerform`, which on a two-core machine runs only two at
/// a time: the point is many callers inside the store at once, as the server's worker threads are.
func runConcurrently<Value: Sendable>(
    _ count: Int, timeout: Int = 120, _ body: @escaping @Sendable (Int) throws(StorageError) -> Value
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
    _ = finished.wait(timeout: .now() + .seconds(timeout))
    return outcomes.withLock { outcomes in
        (0..<count).map {
            outcomes[$0] ?? .failure(StorageError(.queryFailed, "thread \($0) had not finished after \(timeout) s"))
        }
    }
}
