import Synchronization

/// Takes the wait for durability off the caller's thread: inside ``run(_:)``, a SQLite write
/// returns as soon as its statements have run in the group commit's open batch, and the scope
/// notes the batch; the caller holds back whatever depends on the write (an HTTP response) until
/// ``whenDurable(_:)`` says the batch is on disk.
///
/// An fsync takes milliseconds while the statements it protects take microseconds. A write that
/// blocked its thread until the fsync returned kept a worker thread idle for that long, so the
/// server needed many more threads than cores to keep the CPU busy, and paid for them in context
/// switches and memory. With a scope, the HTTP transport answers a request on its worker thread,
/// suspends the connection if the answer depends on a batch not yet durable, and lets the worker
/// serve other connections; the group commit resumes the connection when the batch is durable.
/// The guarantee is unchanged: nothing a write decided reaches a client before the write is
/// durable, and if its batch fails, the client gets a 503 instead.
///
/// Reads count too. A reader connection sees a batch once it is committed, which is before it
/// is fsynced, so a read notes the newest batch whose commit had begun: an answer built on data
/// that a power loss could still take back waits for that data to be durable.
///
/// Without a scope (the cleanup timer, admin commands, tests calling the storage directly) a
/// write blocks until durable, as it always did. PostgreSQL writes always block: its commit is
/// durable when it returns, and nothing is noted.
package final class DurabilityScope: Sendable {
    /// The scope of the work running on this thread, if any.
    @TaskLocal static var current: DurabilityScope?

    /// The batches noted that were not yet durable when noted, or since (a request uses one
    /// database, but the scope does not rely on it).
    private let batches = Mutex<[SQLiteCommitBatch]>([])

    private init() {}

    /// Runs `body` with a new scope, and returns its result with the scope, which holds what the
    /// result depends on.
    package static func run<Value, Failure: Error>(
        _ body: () throws(Failure) -> Value
    ) throws(Failure) -> (Value, DurabilityScope) {
        let scope = DurabilityScope()
        let result = $current.withValue(scope) { Result { () throws(Failure) in try body() } }
        return (try result.get(), scope)
    }

    /// Where what the scope noted stands: durable when nothing was noted.
    package var outcome: DurabilityOutcome {
        var result = DurabilityOutcome.durable
        for batch in batches.withLock({ $0 }) {
            switch batch.outcome {
            case .failed(let error): return .failed(error)
            case .pending: result = .pending
            case .durable: break
            }
        }
        return result
    }

    /// Whether anything was noted: when not, ``whenDurable(_:)`` would call its body at once.
    package var hasNotedWrites: Bool {
        batches.withLock { !$0.isEmpty }
    }

    /// Calls `body` once when everything noted is durable (with nil) or one of it failed (with the
    /// batch's error): at once, on the calling thread, when it is already so; otherwise on the
    /// group commit's queue, which must not be blocked for long.
    package func whenDurable(_ body: @escaping @Sendable (StorageError?) -> Void) {
        let pending = batches.withLock { $0 }
        guard !pending.isEmpty else {
            body(nil)
            return
        }
        let countdown = DurabilityCountdown(count: pending.count, body)
        for batch in pending {
            batch.whenSettled { countdown.settled($0) }
        }
    }

    /// Notes that the result depends on `batch`.
    ///
    /// Every batch noted stays until it is durable, even when a newer one of the same committer
    /// is noted: a newer batch that succeeds does not hold the writes of an older one that
    /// failed (its transaction was rolled back, or its sync failed), and the answer must then be
    /// a 503, not the newer batch's success.
    func require(_ batch: SQLiteCommitBatch) {
        batches.withLock { batches in
            batches.removeAll { noted in
                if case .durable = noted.outcome { return true }
                return false
            }
            let noted = batches.contains { $0.committer == batch.committer && $0.sequence == batch.sequence }
            if !noted { batches.append(batch) }
        }
    }

    /// Whether a batch this scope wrote in is still open on `committer`: its changes are visible
    /// only on the writer connection until it commits.
    func hasOpenBatch(on committer: ObjectIdentifier) -> Bool {
        batches.withLock { batches in
            batches.contains { $0.committer == committer && !$0.isCommitted }
        }
    }
}

/// Where a write, or what a scope noted, stands.
package enum DurabilityOutcome: Sendable {
    /// Not yet durable.
    case pending
    /// Durable: its answer may go out.
    case durable
    /// Could not be made durable: the answer must be a 503.
    case failed(StorageError)
}

/// Calls its body once, after `count` settlements, with the first failure if any.
private final class DurabilityCountdown: Sendable {
    private let state: Mutex<(remaining: Int, failure: StorageError?)>
    private let body: @Sendable (StorageError?) -> Void

    init(count: Int, _ body: @escaping @Sendable (StorageError?) -> Void) {
        state = Mutex((count, nil))
        self.body = body
    }

    func settled(_ failure: StorageError?) {
        let outcome: StorageError?? = state.withLock { state in
            state.remaining -= 1
            if state.failure == nil { state.failure = failure }
            return state.remaining == 0 ? .some(state.failure) : .none
        }
        if let outcome { body(outcome) }
    }
}
