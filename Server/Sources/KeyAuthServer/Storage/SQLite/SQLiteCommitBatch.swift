import Dispatch
import Synchronization

/// One transaction of the group commit: open while writes join it, then committed, then settled
/// once its fsync returned (durable) or it failed.
///
/// Callers wait for it in one of two ways: a thread without a ``DurabilityScope`` blocks in
/// ``wait()``; a scope registers ``whenSettled(_:)`` callbacks, which the committer calls on its
/// queue when the batch settles.
final class SQLiteCommitBatch: Sendable {
    /// Increases by one per batch of a committer: a batch is durable only after every earlier one.
    let sequence: UInt64
    /// The committer the batch belongs to.
    let committer: ObjectIdentifier

    private enum State {
        case pending(waiters: [@Sendable (StorageError?) -> Void])
        case settled(StorageError?)
    }

    private let state = Mutex(State.pending(waiters: []))
    private let committed = Atomic<Bool>(false)

    init(sequence: UInt64, committer: ObjectIdentifier) {
        self.sequence = sequence
        self.committer = committer
    }

    /// Whether `COMMIT` has returned (or the batch failed): reader connections see its changes.
    var isCommitted: Bool {
        committed.load(ordering: .acquiring)
    }

    /// Whether the batch is durable or failed.
    var isSettled: Bool {
        if case .pending = outcome { return false }
        return true
    }

    /// Where the batch stands.
    var outcome: DurabilityOutcome {
        state.withLock {
            switch $0 {
            case .pending: .pending
            case .settled(nil): .durable
            case .settled(let failure?): .failed(failure)
            }
        }
    }

    /// Calls `body` once with the outcome: at once when settled, else when it settles.
    func whenSettled(_ body: @escaping @Sendable (StorageError?) -> Void) {
        let outcome: StorageError?? = state.withLock { state in
            switch state {
            case .pending(var waiters):
                waiters.append(body)
                state = .pending(waiters: waiters)
                return .none
            case .settled(let failure):
                return .some(failure)
            }
        }
        if let outcome { body(outcome) }
    }

    /// Blocks until the batch settles.
    ///
    /// - Throws: the batch's error when its transaction or its fsync failed.
    func wait() throws(StorageError) {
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<StorageError?>(nil)
        whenSettled { failure in
            outcome.withLock { $0 = failure }
            done.signal()
        }
        done.wait()
        if let failure = outcome.withLock({ $0 }) { throw failure }
    }

    /// Marks the batch committed: reader connections see it from now on.
    func markCommitted() {
        committed.store(true, ordering: .releasing)
    }

    /// Settles the batch (durable with nil) and calls every waiter. Only the first call counts.
    func settle(_ failure: StorageError?) {
        markCommitted()
        let waiters: [@Sendable (StorageError?) -> Void] = state.withLock { state in
            guard case .pending(let waiters) = state else { return [] }
            state = .settled(failure)
            return waiters
        }
        for waiter in waiters { waiter(failure) }
    }
}
