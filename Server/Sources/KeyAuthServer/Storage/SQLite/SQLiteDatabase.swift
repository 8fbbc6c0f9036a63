import Glibc
import Synchronization

/// One SQLite file as an ``SQLDatabase``: WAL mode, one writer connection behind a group
/// committer and a few reader connections, each behind its own `Mutex`.
///
/// WAL lets readers run while the writer commits, so logins (which mostly read) do not queue
/// behind registrations. SQLite allows one writer at a time anyway, so one write connection
/// loses nothing. Every commit is fsynced before anything it decided is answered (what
/// `synchronous=FULL` does, done by the committer outside the write lock; see
/// ``SQLiteWALFile``): an answer the server sent (a consumed `jti`, a revocation) is on disk,
/// even after `kill -9` or power loss. Concurrent writes share one commit and one fsync
/// (``SQLiteGroupCommitter``); deferred writes (`last_login_at`) ride along with the next batch.
///
/// Inside a ``DurabilityScope`` a write returns once it has run and the scope holds its batch,
/// and a read notes the newest batch it may have seen; a request that wrote in a batch not yet
/// committed reads on the writer connection, which sees that batch.
final class SQLiteDatabase: SQLDatabase {
    let committer: SQLiteGroupCommitter
    private let readers: [SQLiteConnectionBox]
    private let nextReader = Atomic<Int>(0)
    private let isClosed = Atomic<Bool>(false)
    private let busyTimeoutMilliseconds: Int32
    /// Every keyauth process's device changes on this file, for the login's device cache.
    let deviceChanges: SQLiteDeviceChanges?

    var dialect: SQLDialect { .sqlite }

    /// Opens or creates the database at `path` and switches it to WAL.
    ///
    /// - Parameters:
    ///   - path: the database file (created if missing).
    ///   - readerCount: connections for reads, besides the one writer.
    ///   - busyTimeoutMilliseconds: how long a statement waits for another process's lock.
    ///   - log: what makes commits durable; by default `fdatasync` of the file's WAL.
    ///   - restartBytes: the log file's size past which the committer rewinds the log (tests use
    ///     less).
    ///   - syncingInCommit: see ``SQLiteGroupCommitter``.
    /// - Throws: ``StorageError`` when the file cannot be opened or switched to WAL.
    init(
        path: String, readerCount: Int, busyTimeoutMilliseconds: Int32, log: (any SQLiteWALSync)? = nil,
        restartBytes: Int = SQLiteGroupCommitter.defaultRestartBytes, syncingInCommit: Bool = false
    ) throws(StorageError) {
        self.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        let deviceChanges = try SQLiteDeviceChanges(databasePath: path)
        self.deviceChanges = deviceChanges
        let writerConnection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        try writerConnection.reportDeviceChanges(to: deviceChanges)
        // Several processes may open a new file at once. Switching to WAL needs an exclusive
        // lock, and SQLite answers "busy" at once instead of waiting when waiting could deadlock.
        let mode = try Self.retryingWhileBusy(timeoutMilliseconds: busyTimeoutMilliseconds) { () throws(StorageError) in
            try writerConnection.execute("PRAGMA journal_mode = WAL").firstRow?.text(0)
        }
        guard mode?.lowercased() == "wal" else {
            throw StorageError(.unavailable, "cannot switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        committer = try SQLiteGroupCommitter(
            writerConnection,
            checkpointer: SQLiteConnection(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds),
            log: log ?? SQLiteWALFile(databasePath: path), logPath: path + "-wal", restartBytes: restartBytes,
            syncingInCommit: syncingInCommit)
        var readers: [SQLiteConnectionBox] = []
        for _ in 0..<max(readerCount, 1) {
            let connection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
            try connection.execute("PRAGMA query_only = ON")
            readers.append(SQLiteConnectionBox(connection))
        }
        self.readers = readers
    }

    /// Runs `body` again (after a short pause) while it fails with `SQLITE_BUSY`, until the
    /// busy timeout has passed.
    private static func retryingWhileBusy<Result>(
        timeoutMilliseconds: Int32, _ body: () throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        let deadline = ServerClock.monotonicNanoseconds() + UInt64(max(timeoutMilliseconds, 0)) * 1_000_000
        while true {
            do {
                return try body()
            } catch {
                guard ((error.underlying?.code ?? 0) & 0xFF) == 5, ServerClock.monotonicNanoseconds() < deadline else {
                    throw error
                }
                usleep(20_000)
            }
        }
    }

    /// Runs `body` on the next reader, round robin; on the writer when the current
    /// ``DurabilityScope`` wrote in a batch not yet committed, so that a request reads what its
    /// own writes saw.
    func read<Result: Sendable>(
        _ body: (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        if committer.scopeHasOpenBatch {
            return try committer.read { connection throws(StorageError) in try body(connection) }
        }
        let index = nextReader.wrappingAdd(1, ordering: .relaxed).oldValue
        let result = try readers[(index & Int.max) % readers.count].with { connection throws(StorageError) in
            try body(connection)
        }
        committer.noteRead()
        return result
    }

    func noteKeptRead() {
        committer.noteRead()
    }

    /// Runs `body` in the group commit's open batch; returns once the batch is durable, or at
    /// once inside a ``DurabilityScope``, which then holds the batch.
    func write<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        return try committer.write { connection throws(StorageError) in try body(connection) }
    }

    /// SQLite's writes wait for their fsync without a thread inside a ``DurabilityScope``.
    var writesBlockUntilDurable: Bool { false }

    /// A write through the group commit, retried while another process holds the file (several
    /// servers or commands opening a new file at once) until the busy timeout.
    ///
    /// It then watches the migrated `devices` table for changes (``SQLiteDeviceChanges``). A
    /// migration may change devices before the triggers exist, so it counts as a device change
    /// itself: every server's cache on the file is dropped.
    func migrate(_ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Void) throws(StorageError) {
        deviceChanges?.noteChangeStarted()
        defer { deviceChanges?.noteChangeFinished() }
        try Self.retryingWhileBusy(timeoutMilliseconds: busyTimeoutMilliseconds) { () throws(StorageError) in
            guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
            try committer.write { connection throws(StorageError) in
                try body(connection)
                try connection.watchDevices()
            }
        }
    }

    func writeEventually(_ write: SQLDeferredWrite) throws(StorageError) {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        try committer.writeEventually(write)
    }

    func pendingValue(of sql: String, key: String) -> SQLValue? {
        committer.pendingValue(of: sql, key: key)
    }

    func pendingValues(of sql: String) -> [String: SQLValue] {
        committer.pendingValues(of: sql)
    }

    func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        committer.close()
        for reader in readers { reader.close() }
    }
}

/// One connection behind a mutex; closing drops the connection (its `deinit` closes the handle)
/// once no caller holds it.
final class SQLiteConnectionBox: Sendable {
    private let connection: Mutex<SQLiteConnection?>

    init(_ connection: consuming sending SQLiteConnection) {
        self.connection = Mutex(connection)
    }

    func with<Result: Sendable>(
        _ body: (SQLiteConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try connection.withLock { (connection: inout SQLiteConnection?) throws(StorageError) -> Result in
            guard let connection else { throw StorageError(.closed, "the storage is closed") }
            return try body(connection)
        }
    }

    func close() {
        connection.withLock { $0 = nil }
    }
}
