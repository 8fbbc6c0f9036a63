internal import CKeyAuthSQLite
import KeyAuth

/// The SQLite driver: the one owner of a `sqlite3` handle, with its prepared statements.
///
/// A handle is used by one thread at a time (it is opened with `SQLITE_OPEN_NOMUTEX` because
/// ``SQLiteDatabase`` keeps each connection behind a `Mutex`), so the class is not `Sendable`.
final class SQLiteConnection: SQLConnection {
    let handle: OpaquePointer
    private var statements: [String: SQLiteStatement] = [:]
    /// Set on the writer connection by ``reportDeviceChanges(to:)``.
    var deviceChangeMark: SQLiteDeviceChangeMark?

    var dialect: SQLDialect { .sqlite }

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
        // Closing rolled back any open transaction.
        deviceChangeMark?.transactionEnded()
    }

    /// Runs one statement through a cached prepared statement and reads all its rows.
    ///
    /// The statement is reset before returning, which ends its implicit read transaction, so
    /// that no WAL snapshot is held between calls.
    @discardableResult
    func execute(_ sql: String, _ bindings: [SQLValue]) throws(StorageError) -> SQLResult {
        // Runs after the reset below: a statement outside a transaction commits by then.
        defer { noteIfTransactionEnded() }
        let statement = try prepared(sql)
        defer { statement.reset() }
        try statement.bind(bindings)
        let changesBefore = sqlite3_total_changes64(handle)
        var rows: [SQLRow] = []
        while try statement.step() {
            rows.append(statement.row())
        }
        return SQLResult(rows: rows, affectedRowCount: Int(sqlite3_total_changes64(handle) - changesBefore))
    }

    /// Whether a transaction is open: false again after SQLite rolled one back on its own (an
    /// I/O error, a full disk), which a batch of writes must notice.
    var isInTransaction: Bool {
        sqlite3_get_autocommit(handle) == 0
    }

    /// A cached prepared statement for `sql`.
    ///
    /// - Throws: `.queryFailed` when `sql` does not compile or holds more than one statement
    ///   (SQLite would silently ignore the rest).
    private func prepared(_ sql: String) throws(StorageError) -> SQLiteStatement {
        if let statement = statements[sql] { return statement }
        var pointer: OpaquePointer?
        var trailingText = false
        let result = sql.withCString { text in
            var tail: UnsafePointer<CChar>?
            let result = sqlite3_prepare_v2(handle, text, -1, &pointer, &tail)
            trailingText = tail.map { !String(cString: $0).allSatisfy(\.isWhitespace) } ?? false
            return result
        }
        guard result == SQLITE_OK, let pointer else {
            throw StorageError(
                .queryFailed, "cannot prepare a SQLite statement", underlying: Self.native(result, handle))
        }
        let statement = SQLiteStatement(taking: pointer, connection: handle)
        guard !trailingText else {
            throw StorageError(.queryFailed, "a SQLite statement text holds more than one statement")
        }
        statements[sql] = statement
        return statement
    }

    /// Copies this whole database into `destination`'s with SQLite's online backup API, as one
    /// consistent snapshot even while a server writes to this one.
    ///
    /// All pages are copied in one step, which reads inside one read transaction: under WAL it
    /// sees one snapshot and never blocks the writer. A step that finds the source locked (a
    /// writer without WAL, or a checkpoint) is retried for up to 30 seconds.
    /// - Throws: `.queryFailed` with SQLite's code and text when the copy fails.
    func backup(into destination: SQLiteConnection) throws(StorageError) {
        guard let backup = sqlite3_backup_init(destination.handle, "main", handle, "main") else {
            throw StorageError(
                .queryFailed, "cannot start the backup",
                underlying: Self.native(sqlite3_errcode(destination.handle), destination.handle))
        }
        var result = SQLITE_OK
        var waited = 0
        repeat {
            result = sqlite3_backup_step(backup, -1)
            if result == SQLITE_BUSY || result == SQLITE_LOCKED {
                guard waited < 30_000 else { break }
                sqlite3_sleep(100)
                waited += 100
            }
        } while result == SQLITE_OK || result == SQLITE_BUSY || result == SQLITE_LOCKED
        let finished = sqlite3_backup_finish(backup)
        guard result == SQLITE_DONE, finished == SQLITE_OK else {
            let code = result == SQLITE_DONE ? finished : result
            throw StorageError(.queryFailed, "the backup failed", underlying: Self.native(code))
        }
    }

    /// The error text of `result`, from the handle when there is one (it is more specific).
    static func native(_ result: Int32, _ handle: OpaquePointer? = nil) -> NativeError {
        let text = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(result))
        return NativeError(library: "sqlite", code: Int(result), text: text)
    }
}

@available(*, unavailable)
extension SQLiteConnection: Sendable {}
