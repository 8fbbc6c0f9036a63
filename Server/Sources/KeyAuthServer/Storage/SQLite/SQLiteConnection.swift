internal import CKeyAuthSQLite
import KeyAuth

/// A value bound to a statement parameter or read from a result column.
enum SQLiteValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case text(String)
    case blob([UInt8])
}

/// The one owner of a `sqlite3` handle, with its prepared statements.
///
/// A handle is used by one thread at a time (it is opened with `SQLITE_OPEN_NOMUTEX` because
/// ``SQLiteStorage`` keeps each connection behind a `Mutex`), so the class is not `Sendable`.
final class SQLiteConnection {
    let handle: OpaquePointer
    private var statements: [String: SQLiteStatement] = [:]

    /// Opens (creating if needed) the database file at `path` and sets the per-connection
    /// pragmas: a busy timeout so that a concurrent admin command waits instead of failing, and
    /// `synchronous=FULL` so that an acknowledged write survives power loss and `kill -9`.
    init(path: String, busyTimeoutMilliseconds: Int32) throws(StorageError) {
        var pointer: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &pointer, flags, nil)
        guard let pointer else {
            throw StorageError(.unavailable, "cannot open the SQLite database \(path)", underlying: Self.native(result))
        }
        guard result == SQLITE_OK else {
            let error = StorageError(
                .unavailable, "cannot open the SQLite database \(path)", underlying: Self.native(result, pointer))
            sqlite3_close_v2(pointer)
            throw error
        }
        handle = pointer
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, busyTimeoutMilliseconds)
        try execute("PRAGMA synchronous = FULL")
        try execute("PRAGMA foreign_keys = ON")
    }

    deinit {
        // Finalize first: a handle with live statements would only become a zombie.
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Runs SQL without parameters (pragmas, schema). Never used with request data.
    func execute(_ sql: String) throws(StorageError) {
        var message: UnsafeMutablePointer<CChar>?
        let result = sqlite3_exec(handle, sql, nil, nil, &message)
        defer { sqlite3_free(message) }
        guard result == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(result))
            throw StorageError(
                .queryFailed, "SQLite statement failed",
                underlying: NativeError(library: "sqlite", code: Int(result), text: text))
        }
    }

    /// Runs a parameterised statement that returns no rows.
    ///
    /// - Returns: the number of rows it changed.
    @discardableResult
    func run(_ sql: String, _ bindings: [SQLiteValue] = []) throws(StorageError) -> Int {
        let statement = try prepared(sql)
        defer { statement.reset() }
        try statement.bind(bindings)
        while try statement.step() {}
        return Int(sqlite3_changes(handle))
    }

    /// Runs a parameterised query and maps each row.
    func query<Row>(
        _ sql: String, _ bindings: [SQLiteValue] = [], row: (SQLiteStatement) throws(StorageError) -> Row
    ) throws(StorageError) -> [Row] {
        let statement = try prepared(sql)
        // Resetting ends the implicit read transaction, so the WAL snapshot is never held.
        defer { statement.reset() }
        try statement.bind(bindings)
        var rows: [Row] = []
        while try statement.step() {
            rows.append(try row(statement))
        }
        return rows
    }

    /// Runs `body` inside `BEGIN IMMEDIATE ... COMMIT`, rolling back when it throws.
    func transaction<Result>(_ body: () throws(StorageError) -> Result) throws(StorageError) -> Result {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Whether a transaction is open: false again after SQLite rolled one back on its own (an
    /// I/O error, a full disk), which a batch of writes must notice.
    var isInTransaction: Bool {
        sqlite3_get_autocommit(handle) == 0
    }

    /// A cached prepared statement for `sql`.
    private func prepared(_ sql: String) throws(StorageError) -> SQLiteStatement {
        if let statement = statements[sql] { return statement }
        var pointer: OpaquePointer?
        let result = sqlite3_prepare_v2(handle, sql, -1, &pointer, nil)
        guard result == SQLITE_OK, let pointer else {
            throw StorageError(
                .queryFailed, "cannot prepare a SQLite statement", underlying: Self.native(result, handle))
        }
        let statement = SQLiteStatement(taking: pointer, connection: handle)
        statements[sql] = statement
        return statement
    }

    /// The error text of `result`, from the handle when there is one (it is more specific).
    static func native(_ result: Int32, _ handle: OpaquePointer? = nil) -> NativeError {
        let text = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(result))
        return NativeError(library: "sqlite", code: Int(result), text: text)
    }
}

@available(*, unavailable)
extension SQLiteConnection: Sendable {}
