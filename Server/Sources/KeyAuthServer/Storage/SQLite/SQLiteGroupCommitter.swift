import Dispatch
import Synchronization

/// Group commit, a layer over the one SQLite write connection: writes from many request
/// threads are run by a single committer in one transaction, made durable by one fsync, and
/// only then answered.
///
/// With `synchronous=FULL` every commit fsyncs the WAL, and an fsync costs far more than the
/// statements it protects. One transaction per write serializes the server on the disk; here a
/// request thread queues its write and blocks, the committer takes every write queued so far,
/// runs each in its own savepoint inside one `BEGIN IMMEDIATE ... COMMIT`, and wakes the waiters
/// once `COMMIT` has returned. Writes that arrive while a commit is in flight form the next
/// batch, so batches grow with load and an idle server still commits a lone write at once (no
/// timer delays it).
///
/// Guarantees:
/// - A write's caller gets its result only after the transaction holding it is durable; if
///   `BEGIN` or `COMMIT` fails, every write of the batch fails with that error (a 503), so
///   nothing that was answered can be lost by `kill -9` or power loss.
/// - Writes run one after another in the order they were queued, on one connection, each with
///   its own result: two claims of the same `jti` in one batch see each other, and the first
///   one inserts.
/// - A write that throws is rolled back to its savepoint and fails alone; the rest of the batch
///   commits. If SQLite aborted the whole transaction, the whole batch fails.
///
/// Deferred writes (``writeEventually(_:)``, informational updates such as `last_login_at`) are
/// the exception: they are only noted in memory, and written with the next batch, or at the
/// latest a second later. After a crash they may lag by up to a second; reads in this process
/// see them at once through ``pendingValue(of:key:)``.
final class SQLiteGroupCommitter: Sendable {
    /// How long a deferred write may wait for a batch before it is written on its own.
    static let deferredFlushDelay = DispatchTimeInterval.seconds(1)

    private struct Queue: Sendable {
        var pending: [any SQLiteBatchedWrite] = []
        /// Whether a drain is scheduled or running on the queue.
        var draining = false
        var isClosed = false
    }

    /// Deferred values by statement, then by key, under a lock of their own: every login reads
    /// them and should not contend with the writers' queue.
    private struct DeferredWrites: Sendable {
        /// Not yet given to a batch.
        var recorded: [String: [String: SQLValue]] = [:]
        /// In the batch being committed (still shown to readers until it is).
        var flushing: [String: [String: SQLValue]] = [:]
        var flushScheduled = false
        var isClosed = false
    }

    private let writes = Mutex(Queue())
    private let deferred = Mutex(DeferredWrites())
    /// Confines the connection: every statement on it runs on this serial queue.
    private let queue = DispatchQueue(label: "keyauth.sqlite.group-commit")
    private let writer: SQLiteConnectionBox

    init(_ connection: consuming sending SQLiteConnection) {
        writer = SQLiteConnectionBox(connection)
    }

    /// Queues `body` for the next batch and returns at once; the returned write's `result()`
    /// waits until the batch is durable.
    ///
    /// `body` runs on the committer's queue and must not call back into the storage.
    /// - Throws: `.closed` after ``close()``.
    func submit<Value: Sendable>(
        _ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> Value
    ) throws(StorageError) -> SQLiteQueuedWrite<Value> {
        let write = SQLiteQueuedWrite(body)
        try writes.withLock { queued throws(StorageError) in
            guard !queued.isClosed else { throw StorageError(.closed, "the storage is closed") }
            queued.pending.append(write)
            if !queued.draining {
                // Scheduled under the lock, so that `close` finds it ahead of its own block.
                queued.draining = true
                queue.async { self.drain() }
            }
        }
        return write
    }

    /// Runs `body` on the write connection in the next batch and returns its result once the
    /// batch is durable.
    ///
    /// - Throws: the error `body` threw (its changes are rolled back), or the batch's `BEGIN` or
    ///   `COMMIT` error, or `.closed`.
    func write<Value: Sendable>(
        _ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> Value
    ) throws(StorageError) -> Value {
        try submit(body).result()
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

    /// Refuses new writes, waits for the accepted ones, writes the deferred ones and closes the
    /// connection. Idempotent.
    func close() {
        let wasOpen = writes.withLock { queued in
            let wasOpen = !queued.isClosed
            queued.isClosed = true
            return wasOpen
        }
        guard wasOpen else { return }
        // Every write accepted before `isClosed` was set is in a drain scheduled ahead of this
        // block (or in the one running), so it has been answered when the block runs.
        queue.sync {
            let last = deferred.withLock { deferred in
                deferred.isClosed = true
                return Self.takeRecorded(&deferred)
            }
            if !last.isEmpty { commit([], deferred: last) }
            writer.close()
        }
    }

    // MARK: On the queue

    /// Commits batches until no write is waiting.
    private func drain() {
        while true {
            let batch = writes.withLock { queued -> [any SQLiteBatchedWrite] in
                if queued.pending.isEmpty { queued.draining = false }
                defer { queued.pending = [] }
                return queued.pending
            }
            guard !batch.isEmpty else { return }
            commit(batch, deferred: deferred.withLock { Self.takeRecorded(&$0) })
        }
    }

    /// Writes the deferred writes that no batch has taken within the flush delay.
    private func flushDeferred() {
        let recorded = deferred.withLock { deferred in
            deferred.flushScheduled = false
            return Self.takeRecorded(&deferred)
        }
        if !recorded.isEmpty { commit([], deferred: recorded) }
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

    /// Runs one batch in one transaction and answers its writes.
    private func commit(_ batch: [any SQLiteBatchedWrite], deferred committed: [String: [String: SQLValue]]) {
        var failure: StorageError?
        do {
            try writer.with { connection throws(StorageError) in
                try Self.runTransaction(batch, deferred: committed, on: connection)
            }
        } catch {
            failure = error
        }
        deferred.withLock { deferred in
            deferred.flushing = [:]
            // Values that did not reach the disk are kept for a later batch, unless a newer one
            // for the same key was recorded meanwhile.
            if failure != nil, !committed.isEmpty, !deferred.isClosed {
                for (sql, values) in committed {
                    deferred.recorded[sql, default: [:]].merge(values) { newer, _ in newer }
                }
                scheduleDeferredFlush(&deferred)
            }
        }
        for write in batch {
            write.finish(failure: failure)
        }
    }

    private static func runTransaction(
        _ writes: [any SQLiteBatchedWrite], deferred: [String: [String: SQLValue]], on connection: SQLiteConnection
    ) throws(StorageError) {
        try connection.execute("BEGIN IMMEDIATE")
        do throws(StorageError) {
            for write in writes {
                try connection.execute("SAVEPOINT batched_write")
                if !write.perform(on: connection) {
                    guard connection.isInTransaction else {
                        throw StorageError(.queryFailed, "SQLite rolled back a batch of writes")
                    }
                    try connection.execute("ROLLBACK TO batched_write")
                }
                try connection.execute("RELEASE batched_write")
            }
            for (sql, values) in deferred {
                for (key, value) in values {
                    // Informational: a failure here must not cost the batch its writes.
                    let write = SQLDeferredWrite(sql: sql, key: key, value: value)
                    _ = try? connection.execute(write.sql, write.bindings)
                }
            }
            try connection.execute("COMMIT")
        } catch {
            if connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
            throw error
        }
    }
}

/// A queued write as the committer sees it, whatever its result type.
protocol SQLiteBatchedWrite: AnyObject, Sendable {
    /// Runs the write inside the batch's transaction; false when it threw.
    func perform(on connection: SQLiteConnection) -> Bool
    /// Wakes the waiting caller; `failure` (the batch's error) replaces the write's own result.
    func finish(failure: StorageError?)
}

/// One caller's write, its result and the semaphore the caller waits on.
final class SQLiteQueuedWrite<Value: Sendable>: SQLiteBatchedWrite {
    private let body: @Sendable (SQLiteConnection) throws(StorageError) -> Value
    private let outcome = Mutex<Result<Value, StorageError>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(_ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> Value) {
        self.body = body
    }

    func perform(on connection: SQLiteConnection) -> Bool {
        let result = Result { () throws(StorageError) in try body(connection) }
        outcome.withLock { $0 = result }
        if case .success = result { return true }
        return false
    }

    func finish(failure: StorageError?) {
        if let failure { outcome.withLock { $0 = .failure(failure) } }
        done.signal()
    }

    /// Blocks until the batch holding this write is committed (or failed). Call it once.
    func result() throws(StorageError) -> Value {
        done.wait()
        guard let outcome = outcome.withLock({ $0 }) else {
            throw StorageError(.queryFailed, "a batched write finished without running")
        }
        return try outcome.get()
    }
}
