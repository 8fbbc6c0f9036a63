/// The connections of one database and the rules for using them: which connection a read or a
/// write gets, when a write counts as done, and what is retried.
///
/// This is where the backends differ in *behaviour*, not in SQL: ``SQLiteDatabase`` reads on a
/// few reader connections and batches every write through one writer (group commit, one fsync
/// per batch); ``PostgresConnectionPool`` checks any pooled connection out and retries only
/// work that is safe to repeat. ``SQLStorage`` writes its SQL once against this protocol.
protocol SQLDatabase: Sendable {
    /// The dialect of the database's connections.
    var dialect: SQLDialect { get }

    /// What tells a cache of device records that another process changed one; nil where no
    /// such signal exists (PostgreSQL), and every login reads its device.
    var deviceChanges: SQLiteDeviceChanges? { get }

    /// Runs work that changes nothing. It may run a second time on a new connection when its
    /// connection broke under it.
    ///
    /// - Throws: `.closed` after ``close()``, `.unavailable` when the database cannot be
    ///   reached, or what `body` throws.
    func read<Result: Sendable>(
        _ body: (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result

    /// Holds the current ``DurabilityScope``'s answer until what has committed so far is
    /// durable, as ``read(_:)`` does, for a result kept in memory from an earlier read: a kept
    /// device record may show a change committed but not yet on disk. A no-op where a commit is
    /// durable when it returns (PostgreSQL).
    func noteKeptRead()

    /// Runs work that changes data, atomically: when `body` throws, none of its changes stay.
    /// Returns once the change is durable, or, inside a ``DurabilityScope`` of a database whose
    /// writes do not block (``writesBlockUntilDurable``), once it has run, with the scope holding
    /// what must become durable before anything built on the result is released. Never retried,
    /// since a write may have committed before a broken connection could say so.
    ///
    /// Statements in `body` that must see each other's effects under a lock go inside
    /// ``SQLConnection/transaction(_:)``; a single statement needs none.
    /// - Throws: `.closed` after ``close()``, `.unavailable`, or what `body` throws.
    func write<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result

    /// Runs the schema migration when the storage opens: a write that is safe to repeat as a
    /// whole, so it is retried while another process holds the database (SQLite) or after its
    /// connection broke (PostgreSQL).
    func migrate(_ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Void) throws(StorageError)

    /// Runs `write` now or later: an informational update whose latest value may reach the
    /// disk after the call returns (SQLite writes it with the next batch, at most a second
    /// later). ``pendingValue(of:key:)`` shows it to reads meanwhile.
    func writeEventually(_ write: SQLDeferredWrite) throws(StorageError)

    /// The value of the deferred write of `sql` for `key` that is not yet committed, if any.
    func pendingValue(of sql: String, key: String) -> SQLValue?

    /// Every value of deferred writes of `sql` not yet committed, by key.
    func pendingValues(of sql: String) -> [String: SQLValue]

    /// Whether a write holds its caller's thread until it is durable (PostgreSQL) rather than
    /// handing the wait to a ``DurabilityScope`` (SQLite's group commit); the HTTP transport
    /// sizes its thread pool by it.
    var writesBlockUntilDurable: Bool { get }

    /// Finishes accepted work and releases the connections; later calls throw `.closed`.
    /// Idempotent.
    func close()
}

/// An update that may wait: for one statement, only the newest value per key is written.
struct SQLDeferredWrite: Sendable, Hashable {
    /// An `UPDATE` taking the new value as `$1` and the row's key as `$2`.
    let sql: String
    /// The row's key; a later write of the same statement and key replaces this one.
    let key: String
    /// The new value.
    let value: SQLValue

    /// The statement's bindings: the value, then the key.
    var bindings: [SQLValue] { [value, .text(key)] }
}
