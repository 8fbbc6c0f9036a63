/// One database connection as the storage sees it, whichever driver is behind it: run a
/// statement with bound values, get its rows and its changed-row count.
///
/// Two drivers implement it, each the one owner of its C handle: ``SQLiteConnection``
/// (`sqlite3`) and ``PostgresConnection`` (`PGconn`). Everything above them (transactions,
/// locks, migrations, the storage's SQL and row mapping) is written once against this protocol.
///
/// SQL uses numbered placeholders `$1`, `$2`, ...: PostgreSQL's own syntax, which SQLite reads
/// as named parameters and ``SQLiteConnection`` binds by number. Values are only ever bound,
/// never spliced into SQL text.
///
/// A connection is used by one thread at a time (its database layer sees to that), so
/// implementations are not `Sendable`.
protocol SQLConnection: AnyObject {
    /// The SQL dialect the connection speaks: the fragments in which the backends differ.
    var dialect: SQLDialect { get }

    /// Whether a transaction is open on the connection; a ``transaction(_:)`` inside one
    /// becomes a savepoint.
    var isInTransaction: Bool { get }

    /// Runs one statement with `bindings` for `$1`, `$2`, ...
    ///
    /// - Throws: ``StorageError`` with the driver's native code: `.queryFailed` for a failed
    ///   statement (a constraint, a full disk, a busy timeout), `.unavailable` when the
    ///   database cannot be reached.
    @discardableResult
    func execute(_ sql: String, _ bindings: [SQLValue]) throws(StorageError) -> SQLResult

    /// Runs `body` with no limit of the client's own on how long a statement may go unanswered
    /// (a driver that has one), for a migration: the server runs its statements without a
    /// `statement_timeout`, and one that outlasted the client's limit would be abandoned while
    /// it still held its locks, and the next attempt would wait for them.
    func withoutStatementDeadline<Result>(_ body: () throws(StorageError) -> Result) throws(StorageError) -> Result
}

extension SQLConnection {
    /// No limit to lift: SQLite's statements run in the process, with no server to wait for.
    func withoutStatementDeadline<Result>(_ body: () throws(StorageError) -> Result) throws(StorageError) -> Result {
        try body()
    }

    /// Runs one statement without parameters.
    @discardableResult
    func execute(_ sql: String) throws(StorageError) -> SQLResult {
        try execute(sql, [])
    }

    /// Runs a query and maps each row.
    func query<Row>(
        _ sql: String, _ bindings: [SQLValue] = [], row: (SQLRow) throws(StorageError) -> Row
    ) throws(StorageError) -> [Row] {
        try execute(sql, bindings).rows.map(row)
    }

    /// Runs a lookup by key and maps its first row, or returns nil when there is none: a login
    /// reads its device this way, without an array of mapped rows.
    func queryFirst<Row>(
        _ sql: String, _ bindings: [SQLValue], row: (SQLRow) throws(StorageError) -> Row
    ) throws(StorageError) -> Row? {
        guard let first = try execute(sql, bindings).rows.first else { return nil }
        return try row(first)
    }

    /// Whether a query returns at least one row.
    func exists(_ sql: String, _ bindings: [SQLValue]) throws(StorageError) -> Bool {
        try !execute(sql, bindings).rows.isEmpty
    }

    /// Runs `body` so that its statements take effect together or not at all, rolling back
    /// when it throws; locks taken inside (``lock(_:)``) are held until it ends.
    ///
    /// Inside an open transaction (SQLite's group commit runs every write in one) it is a
    /// savepoint, so that a failing body undoes only its own changes. The dialect says how a
    /// transaction begins: SQLite's `BEGIN IMMEDIATE` takes the database's write lock at once,
    /// so that nothing written between a check and an insert in `body` can slip in.
    func transaction<Result>(_ body: () throws(StorageError) -> Result) throws(StorageError) -> Result {
        let nested = isInTransaction
        try execute(nested ? "SAVEPOINT nested_transaction" : dialect.beginTransaction)
        do {
            let result = try body()
            try execute(nested ? "RELEASE nested_transaction" : "COMMIT")
            return result
        } catch {
            // Best effort: when even this fails, the connection is left inside the transaction,
            // and its owner notices (the group commit fails its batch, the pool resets it).
            if nested {
                _ = try? execute("ROLLBACK TO nested_transaction")
                _ = try? execute("RELEASE nested_transaction")
            } else {
                _ = try? execute("ROLLBACK")
            }
            throw error
        }
    }

    /// Takes `lock` until the end of the current transaction, with the statements the dialect
    /// needs for it (none in SQLite, whose write transaction already excludes every other
    /// writer).
    func lock(_ lock: SQLLock) throws(StorageError) {
        for statement in dialect.statements(locking: lock) {
            try execute(statement.sql, statement.bindings)
        }
    }
}
