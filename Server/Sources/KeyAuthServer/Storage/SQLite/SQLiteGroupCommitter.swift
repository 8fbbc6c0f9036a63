import Dispatch
import Glibc
import Synchronization

/// Group commit, a layer over the one SQLite write connection: writes from many request
/// threads share one transaction and one fsync, and nothing a write decided reaches a client
/// before that fsync has returned.
///
/// An fsync costs far more than the statements it protects (milliseconds against microseconds),
/// so one transaction per write would serialize the server on the disk. Here a write runs at
/// once, on the caller's thread, under the writer's lock, inside the batch that is open (or
/// opens one with `BEGIN IMMEDIATE`), in a savepoint of its own. A committer on a serial queue
/// commits the open batch and then makes it durable (``SQLiteWALSync``) outside the lock, so the
/// next batch fills while the fsync of the last one runs: batches grow with load, and an idle
/// server still commits a lone write at once (no timer delays it). The writer connection of a
/// server alone on its file runs with `synchronous=NORMAL`, so `COMMIT` itself does not wait for
/// the disk; the sync that `FULL` would run inside it runs right after, outside the lock (see
/// ``SQLiteWALFile``). A process that shares the file syncs inside `COMMIT` (see `init`).
///
/// A caller learns its write's result at once and the batch's outcome later:
/// - inside a ``DurabilityScope`` (the HTTP transport), ``write(_:)`` returns the result and
///   notes the batch in the scope; the transport holds the response until the batch settles;
/// - otherwise ``write(_:)`` blocks until the batch is durable, as a plain durable write would.
///
/// Guarantees:
/// - Nothing decided by a write is answered before its batch is durable; if `COMMIT` or the
///   sync fails, every write of the batch fails with that error (a 503), so nothing that was
///   answered can be lost by `kill -9` or power loss.
/// - Writes run one after another, in the order they take the lock, on one connection, each with
///   its own result: two claims of the same `jti` see each other, and the first one inserts.
/// - A write that throws is rolled back to its savepoint and fails alone; the rest of the batch
///   commits. If SQLite aborted the whole transaction, every write of the batch fails, and the
///   next write opens a new batch.
///
/// Checkpoints (copying the log's pages into the database file, with two fsyncs) run on a
/// connection and a queue of their own, at most every ``checkpointInterval``, never inside a
/// `COMMIT`: SQLite's automatic checkpoint would run in the `COMMIT` of every thousandth page,
/// under the writer's lock, and stop every write for as long. A passive checkpoint copies the
/// log but never rewinds it: SQLite writes a log from its start again only when a write
/// transaction begins on a log that is wholly copied and that no reader still uses, and under
/// load the next batch begins before the checkpoint of the last one has run, so the log grew
/// without end (1.2 GB in 10 minutes of the soak benchmark). So when a commit leaves the log file
/// longer than ``restartBytes``, the committer, still holding the writer's lock so that no batch
/// can begin, finishes the copy with a `RESTART` checkpoint (the passive ones have copied most of
/// it; this one waits for readers to leave the log), and the batch after it writes the log from
/// its start; `journal_size_limit` then cuts the file back.
///
/// Deferred writes (``writeEventually(_:)``, informational updates such as `last_login_at`) are
/// the exception: they are only noted in memory, and written with the next batch, or at the
/// latest a second later. After a crash they may lag by up to a second; reads in this process
/// see them at once through ``pendingValue(of:key:)``.
final class SQLiteGroupCommitter: Sendable {
    /// How long a deferred write may wait for a batch before it is written on its own.
    static let deferredFlushDelay = DispatchTimeInterval.seconds(1)
    /// The least time between two checkpoints: a few a second keep the log to a few megabytes
    /// under load, and each costs two fsyncs.
    static let checkpointInterval: UInt64 = 250_000_000
    /// The log file's size past which the log is rewound.
    static let defaultRestartBytes = 16 * 1024 * 1024
    /// The size the log file is cut back to when it is rewound.
    static let journalSizeLimit = 16 * 1024 * 1024

    /// The write connection and the batch open on it, under one lock.
    struct Writer {
        var connection: SQLiteConnection?
        /// The batch whose transaction is open, if any.
        var open: SQLiteCommitBatch?
        var nextSequence: UInt64 = 1
        /// Whether a commit is scheduled or running on the queue.
        var committing = false
        var isClosed = false
        /// The marker holding reads since a sync failed for now, until its resync settles it
        /// (`SQLiteGroupCommitter+Resync.swift`): one at a time, however many syncs fail.
        var resyncMarker: SQLiteCommitBatch?
    }

    /// Deferred values by statement, then by key, under a lock of their own: every login reads
    /// them and should not contend with the writers.
    private struct DeferredWrites: Sendable {
        /// Not yet given to a batch.
        var recorded: [String: [String: SQLValue]] = [:]
        /// In the batch being committed (still shown to readers until it is).
        var flushing: [String: [String: SQLValue]] = [:]
        var flushScheduled = false
        var isClosed = false
    }

    /// The write connection and its open batch; only this type and its extensions take it.
    let writer: Mutex<Writer>
    private let deferred = Mutex(DeferredWrites())
    /// The newest batch whose commit has begun: what a reader connection may see.
    let newestCommitting = Mutex<SQLiteCommitBatch?>(nil)
    /// Runs commits and syncs, one at a time.
    let queue = DispatchQueue(label: "keyauth.sqlite.group-commit")
    /// What makes committed batches durable.
    let log: any SQLiteWALSync
    /// The connection that checkpoints, used only on ``checkpointQueue``.
    private let checkpointer: SQLiteConnectionBox
    private let checkpointQueue = DispatchQueue(label: "keyauth.sqlite.checkpoint")
    /// When the last checkpoint ended (monotonic nanoseconds), or `nil` while one is running.
    private let lastCheckpoint = Mutex<UInt64?>(0)
    /// The log file, whose size decides a rewind; nil to never rewind.
    private let logPath: String?
    /// See ``defaultRestartBytes``.
    let restartBytes: Int
    /// Log rewinds so far, for tests and the soak benchmark's log.
    private let restarts = Atomic<Int>(0)

    /// - Parameters:
    ///   - connection: the write connection; switched to `synchronous=NORMAL` here, since
    ///     `log` makes each commit durable, and to no automatic checkpoint.
    ///   - checkpointer: a connection of its own for checkpoints.
    ///   - log: what makes committed batches durable.
    ///   - logPath: the log file (`PATH-wal`), whose size decides a rewind.
    ///   - restartBytes: the log file's size past which the log is rewound.
    ///   - syncingInCommit: whether `COMMIT` itself syncs the log (`synchronous=FULL`), before it
    ///     makes the transaction visible. Another process on the file (a server beside this one,
    ///     or beside an admin command) sees a commit at once, and knows nothing of this
    ///     process's fsync: it could answer from an approval that a power loss then takes back.
    ///     A server alone on its file leaves it off, and syncs outside the lock.
    init(
        _ connection: consuming sending SQLiteConnection, checkpointer: consuming sending SQLiteConnection,
        log: any SQLiteWALSync, logPath: String? = nil, restartBytes: Int = defaultRestartBytes,
        syncingInCommit: Bool = false
    ) throws(StorageError) {
        try connection.execute(syncingInCommit ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL")
        try connection.execute("PRAGMA wal_autocheckpoint = 0")
        try connection.execute("PRAGMA journal_size_limit = \(Self.journalSizeLimit)")
        self.logPath = logPath
        self.restartBytes = restartBytes
        writer = Mutex(Writer(connection: connection))
        self.checkpointer = SQLiteConnectionBox(checkpointer)
        self.log = log
    }

    /// This committer, as its batches and the scopes that note them name it.
    var identity: ObjectIdentifier { ObjectIdentifier(self) }

    /// Runs `body` on the write connection in the open batch, and returns its result together
    /// with the batch, which settles once the batch is durable or failed.
    ///
    /// `body` runs under the writer's lock and must not call back into the storage.
    /// - Throws: the error `body` threw (its changes are rolled back), `BEGIN`'s error, the
    ///   batch's error when SQLite aborted its transaction, or `.closed`.
    func perform<Value: Sendable>(
        _ body: (SQLiteConnection) throws(StorageError) -> Value
    ) throws(StorageError) -> (Value, SQLiteCommitBatch) {
        let (result, scheduleCommit) = writer.withLock {
            (writer: inout Writer) -> (Result<(Value, SQLiteCommitBatch), StorageError>, Bool) in
            guard !writer.isClosed, let connection = writer.connection else {
                return (.failure(StorageError(.closed, "the storage is closed")), false)
            }
            // After a failed sync no write runs: it would commit, and readers would see what its
            // caller is told failed (``SQLiteWALSync/lostDurability``). An atomic read.
            if let lost = log.lostDurability { return (.failure(lost), false) }
            let result = Result { () throws(StorageError) -> (Value, SQLiteCommitBatch) in
                let batch = try Self.openBatch(&writer, on: connection, committer: identity)
                return (try Self.runInSavepoint(body, batch: batch, writer: &writer, on: connection), batch)
            }
            // Whatever the write's outcome, an open batch must reach the committer.
            let scheduleCommit = writer.open != nil && !writer.committing
            if scheduleCommit { writer.committing = true }
            return (result, scheduleCommit)
        }
        if scheduleCommit { queue.async { self.commitOpenBatches() } }
        return try result.get()
    }

    /// Runs `body` on the write connection and returns its result once its batch is durable,
    /// or at once inside a ``DurabilityScope``, which then holds the batch.
    ///
    /// - Throws: as ``perform(_:)``, and the batch's error when it failed.
    func write<Value: Sendable>(
        _ body: (SQLiteConnection) throws(StorageError) -> Value
    ) throws(StorageError) -> Value {
        let (value, batch) = try perform(body)
        if let scope = DurabilityScope.current {
            scope.require(batch)
        } else {
            try batch.wait()
        }
        return value
    }

    /// Notes a deferred write; written with the next batch or within ``deferredFlushDelay``.
    func writeEventually(_ write: SQLDeferredWrite) throws(StorageError) {
        try deferred.withLock { deferred throws(StorageError) in
            guard !deferred.isClosed else { throw StorageError(.closed, "the storage is closed") }
            deferred.recorded[write.sql, default: [:]][write.key] = write.value
            scheduleDeferredFlush(&deferred)
        }
    }

    /// The value of a deferred write of `sql` for `key` that is not yet committed, if any.
    func pendingValue(of sql: String, key: String) -> SQLValue? {
        deferred.withLock { $0.recorded[sql]?[key] ?? $0.flushing[sql]?[key] }
    }

    /// Every value of deferred writes of `sql` not yet committed, for reads of many rows.
    func pendingValues(of sql: String) -> [String: SQLValue] {
        deferred.withLock { deferred in
            let recorded = deferred.recorded[sql] ?? [:]
            guard let flushing = deferred.flushing[sql] else { return recorded }
            return flushing.merging(recorded) { _, newer in newer }
        }
    }

    /// Refuses new writes, commits and syncs the open batch (its writes are answered), writes
    /// the deferred ones and closes the connection. Idempotent.
    func close() {
        let wasOpen = writer.withLock { writer in
            let wasOpen = !writer.isClosed
            writer.isClosed = true
            return wasOpen
        }
        guard wasOpen else { return }
        // A commit scheduled before this block runs ahead of it; the open batch, if any, is
        // committed here.
        queue.sync {
            let last = deferred.withLock { deferred in
                deferred.isClosed = true
                return Self.takeRecorded(&deferred)
            }
            commit(deferred: last, closing: true)
            writer.withLock { $0.connection = nil }
        }
        checkpointQueue.sync { checkpointer.close() }
    }

    // MARK: On the queue

    /// Commits and syncs batches until none is open.
    ///
    /// After a failed commit the deferred writes stay out of this run and wait for their own
    /// flush a second later: retaken at once, they opened a batch of their own on every turn, and
    /// a disk that kept failing turned the run into a busy loop.
    private func commitOpenBatches() {
        var takingDeferred = true
        while true {
            let writes = takingDeferred ? deferred.withLock { Self.takeRecorded(&$0) } : [:]
            guard let durable = commit(deferred: writes, closing: false) else { return }
            if !durable { takingDeferred = false }
        }
    }

    /// Writes the deferred writes that no batch has taken within the flush delay.
    private func flushDeferred() {
        let recorded = deferred.withLock { deferred in
            deferred.flushScheduled = false
            return Self.takeRecorded(&deferred)
        }
        if !recorded.isEmpty { commit(deferred: recorded, closing: false) }
    }

    /// Moves the recorded deferred writes to the batch being committed.
    private static func takeRecorded(_ deferred: inout DeferredWrites) -> [String: [String: SQLValue]] {
        deferred.flushing = deferred.recorded
        deferred.recorded = [:]
        return deferred.flushing
    }

    private func scheduleDeferredFlush(_ deferred: inout DeferredWrites) {
        guard !deferred.flushScheduled else { return }
        deferred.flushScheduled = true
        queue.asyncAfter(deadline: .now() + Self.deferredFlushDelay) { self.flushDeferred() }
    }

    /// Commits the open batch with `deferred` (opening one for the deferred writes alone when
    /// none is open), syncs it and settles it. Returns nil when no batch was committed, and then
    /// the queue's commit run ends (unless `closing`, which runs outside it); else whether the
    /// batch is durable.
    @discardableResult
    private func commit(deferred committed: [String: [String: SQLValue]], closing: Bool) -> Bool? {
        let taken = writer.withLock { (writer: inout Writer) -> (SQLiteCommitBatch, StorageError?)? in
            // Deferred writes alone begin no batch after a failed sync; an open batch is committed
            // and its sync fails, so that its writers hear so.
            guard let connection = writer.connection,
                writer.open != nil || (!committed.isEmpty && log.lostDurability == nil),
                let batch = try? Self.openBatch(&writer, on: connection, committer: identity)
            else {
                // Nothing to commit (or BEGIN failed for deferred writes alone, which are kept
                // for later): the commit run ends, and the next write schedules a new one.
                if !closing { writer.committing = false }
                return nil
            }
            writer.open = nil
            let previous = newestCommitting.withLock { newest in
                defer { newest = batch }
                return newest
            }
            // A batch open when a sync failed for good is rolled back, not committed for readers.
            if let lost = log.lostDurability {
                if connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
                batch.markCommitted()
                return (batch, lost)
            }
            let failure = Self.commitTransaction(deferred: committed, on: connection)
            // A COMMIT that failed rolled back and showed readers nothing: what they may have
            // seen before it (a marker still holding reads, say) is what they note still.
            if failure != nil { newestCommitting.withLock { $0 = previous } }
            batch.markCommitted()
            if failure == nil { rewindLogIfLong(on: connection) }
            return (batch, failure)
        }
        guard let (batch, commitFailure) = taken else {
            restoreDeferred(committed, failed: !committed.isEmpty)
            return nil
        }
        var failure = commitFailure
        if failure == nil {
            do {
                try log.sync()
            } catch {
                failure = error
            }
        }
        // Committed and not durable, the sync failing for now: a marker takes the batch's place
        // before its writers hear of the failure (see ``installResyncMarker()``).
        let marker =
            commitFailure == nil && failure != nil && log.lostDurability == nil ? installResyncMarker() : nil
        restoreDeferred(committed, failed: failure != nil)
        batch.settle(failure)
        if failure == nil {
            settleResyncMarker()
            checkpointIfDue()
        }
        if let marker { resync(after: marker) }
        return failure == nil
    }

    /// Log rewinds so far.
    var logRestarts: Int { restarts.load(ordering: .relaxed) }

    /// Finishes the checkpoint with `RESTART` when the log file has grown past ``restartBytes``;
    /// called under the writer's lock right after a `COMMIT`, so that no batch begins meanwhile
    /// and the next one writes the log from its start. A busy checkpointer or a reader that stays
    /// past the busy timeout leaves it for a later commit.
    private func rewindLogIfLong(on connection: SQLiteConnection) {
        guard let logPath else { return }
        var status = stat()
        guard stat(logPath, &status) == 0, Int(status.st_size) > restartBytes else { return }
        let done = try? connection.execute("PRAGMA wal_checkpoint(RESTART)").firstRow
        // The row is (busy, log pages, pages copied); busy = 0 means the log may be rewound.
        guard done?.integer(0) == 0 else { return }
        restarts.add(1, ordering: .relaxed)
    }

    /// Starts a passive checkpoint on the checkpoint queue unless one is running or the last one
    /// ended less than ``checkpointInterval`` ago. A passive checkpoint never waits for the
    /// writer, and the writer never waits for it.
    private func checkpointIfDue() {
        let due = lastCheckpoint.withLock { last in
            // Read under the lock: the checkpoint queue stores its (later) reading under it too.
            // The difference still goes through the non-trapping helper, so that no ordering of
            // clock readings can stop the server.
            guard let ended = last,
                ServerClock.nanoseconds(from: ended, to: ServerClock.monotonicNanoseconds())
                    >= Self.checkpointInterval
            else { return false }
            last = nil
            return true
        }
        guard due else { return }
        checkpointQueue.async {
            // A failure only leaves the log longer; the next checkpoint tries again.
            _ = try? self.checkpointer.with { connection throws(StorageError) in
                try connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
            }
            self.lastCheckpoint.withLock { $0 = ServerClock.monotonicNanoseconds() }
        }
    }

    /// Ends the deferred values' flush: values that did not reach the disk are kept for a later
    /// batch, unless a newer one for the same key was recorded meanwhile.
    private func restoreDeferred(_ committed: [String: [String: SQLValue]], failed: Bool) {
        deferred.withLock { deferred in
            deferred.flushing = [:]
            if failed, !committed.isEmpty, !deferred.isClosed {
                for (sql, values) in committed {
                    deferred.recorded[sql, default: [:]].merge(values) { newer, _ in newer }
                }
                scheduleDeferredFlush(&deferred)
            }
        }
    }
}
