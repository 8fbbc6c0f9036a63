import Dispatch
import Synchronization

/// Group commit for the one SQLite write connection: writes from many request threads are run
/// by a single committer in one transaction, made durable by one fsync, and only then answered.
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
/// - Writes run one after another in arrival order on one connection, each with its own result:
///   two claims of the same `jti` in one batch see each other, and exactly one inserts.
/// - A write that throws is rolled back to its savepoint and fails alone; the rest of the batch
///   commits. If SQLite aborted the whole transaction, the whole batch fails.
///
/// Device `last_login_at` times are the exception: ``recordLogin(kid:at:)`` only notes them in
/// memory, and they are written with the next batch, or at the latest a second later. They are
/// informational, so after a crash they may lag by up to a second; reads in this process see
/// them at once through ``pendingLogin(kid:)``.
final class SQLiteGroupCommitter: Sendable {
    /// How long a recorded login may wait for a batch before it is written on its own.
    static let loginFlushDelay = DispatchTimeInterval.seconds(1)

    private struct Queue: Sendable {
        var pending: [any SQLiteBatchedWrite] = []
        /// Whether a drain is scheduled or running on the queue.
        var draining = false
        var isClosed = false
    }

    /// Login times, under a lock of their own: every login reads them (``pendingLogin(kid:)``)
    /// and should not contend with the writers' queue.
    private struct LoginTimes: Sendable {
        /// Not yet given to a batch.
        var recorded: [String: Int64] = [:]
        /// In the batch being committed (still shown to readers until it is).
        var flushing: [String: Int64] = [:]
        var flushScheduled = false
        var isClosed = false
    }

    private let writes = Mutex(Queue())
    private let logins = Mutex(LoginTimes())
    private let commits = Atomic<Int>(0)
    /// Confines the connection: every statement on it runs on this serial queue.
    private let queue = DispatchQueue(label: "keyauth.sqlite.group-commit")
    private let writer: SQLiteConnectionBox

    init(_ connection: consuming sending SQLiteConnection) {
        writer = SQLiteConnectionBox(connection)
    }

    /// Runs `body` on the write connection in the next batch and returns its result once the
    /// batch is durable.
    ///
    /// `body` runs on the committer's queue and must not call back into the storage.
    /// - Throws: the error `body` threw (its changes are rolled back), or the batch's `BEGIN` or
    ///   `COMMIT` error, or `.closed`.
    func write<Result: Sendable>(
        _ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
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
        return try write.result()
    }

    /// Notes a successful login; written with the next batch or within ``loginFlushDelay``.
    func recordLogin(kid: String, at time: Int64) throws(StorageError) {
        try logins.withLock { logins throws(StorageError) in
            guard !logins.isClosed else { throw StorageError(.closed, "the storage is closed") }
            logins.recorded[kid] = time
            scheduleLoginFlush(&logins)
        }
    }

    /// Transactions committed (or attempted) so far: fewer than writes when batches formed.
    var commitCount: Int {
        commits.load(ordering: .relaxed)
    }

    /// Writes waiting for the next batch.
    var queuedWriteCount: Int {
        writes.withLock { $0.pending.count }
    }

    /// The login time of `kid` that is recorded but not yet committed, if any.
    func pendingLogin(kid: String) -> Int64? {
        logins.withLock { $0.recorded[kid] ?? $0.flushing[kid] }
    }

    /// Every login time recorded but not yet committed, for reads of many devices.
    func pendingLogins() -> [String: Int64] {
        logins.withLock { logins in
            logins.flushing.isEmpty ? logins.recorded : logins.flushing.merging(logins.recorded) { _, newer in newer }
        }
    }

    /// Refuses new writes, waits for the accepted ones, writes the pending login times and
    /// closes the connection. Idempotent.
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
            let last = logins.withLock { logins in
                logins.isClosed = true
                return Self.takeRecorded(&logins)
            }
            if !last.isEmpty { commit([], logins: last) }
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
            commit(batch, logins: logins.withLock { Self.takeRecorded(&$0) })
        }
    }

    /// Writes the login times that no batch has taken within the flush delay.
    private func flushLogins() {
        let recorded = logins.withLock { logins in
            logins.flushScheduled = false
            return Self.takeRecorded(&logins)
        }
        if !recorded.isEmpty { commit([], logins: recorded) }
    }

    /// Moves the recorded login times to the batch being committed.
    private static func takeRecorded(_ logins: inout LoginTimes) -> [String: Int64] {
        logins.flushing = logins.recorded
        logins.recorded = [:]
        return logins.flushing
    }

    private func scheduleLoginFlush(_ logins: inout LoginTimes) {
        guard !logins.flushScheduled else { return }
        logins.flushScheduled = true
        queue.asyncAfter(deadline: .now() + Self.loginFlushDelay) { self.flushLogins() }
    }

    /// Runs one batch in one transaction and answers its writes.
    private func commit(_ batch: [any SQLiteBatchedWrite], logins committed: [String: Int64]) {
        commits.add(1, ordering: .relaxed)
        var failure: StorageError?
        do {
            try writer.with { connection throws(StorageError) in
                try Self.runTransaction(batch, logins: committed, on: connection)
            }
        } catch {
            failure = error
        }
        logins.withLock { logins in
            logins.flushing = [:]
            // Times that did not reach the disk are kept for a later batch, unless a newer login
            // of the same device was recorded meanwhile.
            if failure != nil, !committed.isEmpty, !logins.isClosed {
                logins.recorded.merge(committed) { newer, _ in newer }
                scheduleLoginFlush(&logins)
            }
        }
        for write in batch {
            write.finish(failure: failure)
        }
    }

    private static func runTransaction(
        _ writes: [any SQLiteBatchedWrite], logins: [String: Int64], on connection: SQLiteConnection
    ) throws(StorageError) {
        try connection.run("BEGIN IMMEDIATE")
        do throws(StorageError) {
            for write in writes {
                try connection.run("SAVEPOINT batched_write")
                if !write.perform(on: connection) {
                    guard connection.isInTransaction else {
                        throw StorageError(.queryFailed, "SQLite rolled back a batch of writes")
                    }
                    try connection.run("ROLLBACK TO batched_write")
                }
                try connection.run("RELEASE batched_write")
            }
            for (kid, time) in logins {
                // Informational: a failure here must not cost the batch its writes.
                _ = try? connection.run(
                    "UPDATE devices SET last_login_at = ? WHERE kid = ?", [.integer(time), .text(kid)])
            }
            try connection.run("COMMIT")
        } catch {
            if connection.isInTransaction { _ = try? connection.run("ROLLBACK") }
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

    /// Blocks until the batch holding this write is committed (or failed).
    func result() throws(StorageError) -> Value {
        done.wait()
        guard let outcome = outcome.withLock({ $0 }) else {
            throw StorageError(.queryFailed, "a batched write finished without running")
        }
        return try outcome.get()
    }
}
