import Dispatch
import Synchronization

/// The long polls of `GET /v1/auth-requests?wait=SECONDS` on this instance: each waits until a
/// request for its user appears, checked once a second (so that a request made on another
/// instance of a multi-instance deployment is seen within about a second) and at once when one is
/// made here, or until its deadline.
///
/// A waiting poll holds no thread: the responder answers with a ``DeferredResponse`` and the
/// transport suspends the connection, while the checks run on this object's own queue. A worker
/// thread of libmicrohttpd that slept through a wait stopped reading every other keep-alive
/// connection it owned, which then went unanswered until the idle timeout dropped them. The
/// number of polls waiting at once is still bounded (``maximumWaiters``: each costs a
/// connection slot and a storage read a second), and so is each user's share of them
/// (``maximumWaitersPerUser``), so that one device's token cannot take every place and leave the
/// other users' devices polling every few seconds; a further long poll is answered at once, and
/// the client polls again a few seconds later.
final class SignInRequestWatchers: Sendable {
    /// One waiting poll: what it checks, when it gives up, and what it answers with.
    private struct Waiter: Sendable {
        let user: String
        let deadline: UInt64
        /// Reads the open requests; runs on ``queue``.
        let load: @Sendable () throws -> [SignInRequestRecord]
        /// Whether they hold one the poll has not seen.
        let isNew: @Sendable ([SignInRequestRecord]) -> Bool
        let answer: @Sendable (Result<[SignInRequestRecord], any Error>) -> Void
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
        var timer: DispatchSourceTimer?
    }

    /// Long polls allowed to wait at once.
    let maximumWaiters: Int
    /// Long polls of one user allowed to wait at once: a few devices, each watching.
    let maximumWaitersPerUser: Int
    /// How often every waiting poll is checked, for requests made on other instances.
    let checkInterval: DispatchTimeInterval
    private let state = Mutex(State())
    /// Where the checks and answers run: one serial queue, off the transport's threads.
    private let queue = DispatchQueue(label: "keyauth.sign-in-watchers")

    /// - Parameters:
    ///   - maximumWaiters: long polls allowed to wait at once; 0 answers every one at once.
    ///   - maximumWaitersPerUser: long polls of one user allowed to wait at once.
    ///   - checkInterval: how often every poll is checked (a test that must see the wake-up of a
    ///     request made here, and nothing else, makes it long).
    init(maximumWaiters: Int, maximumWaitersPerUser: Int = 8, checkInterval: DispatchTimeInterval = .seconds(1)) {
        self.maximumWaiters = max(maximumWaiters, 0)
        self.maximumWaitersPerUser = max(maximumWaitersPerUser, 0)
        self.checkInterval = checkInterval
    }

    deinit {
        state.withLock { $0.timer?.cancel() }
    }

    /// The long polls waiting now.
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Checks the long polls of `user` on this instance now (a request was made for them here).
    ///
    /// Call it once the request is committed: a check that cannot read it yet leaves the polls
    /// waiting for the next periodic check.
    func notify(user: String) {
        queue.async { self.checkWaiters { $0.user == user } }
    }

    /// Registers a poll of `user` that ends when the requests `load` reads (once a second and on
    /// ``notify(user:)``) hold one that `isNew`, or after `seconds` with the requests as they are;
    /// `answer` gets the result on the watchers' queue.
    ///
    /// - Returns: false when no waiting place was free, or `user` holds their share of them;
    ///   nothing is registered then.
    func wait(
        user: String, seconds: Int, load: @escaping @Sendable () throws -> [SignInRequestRecord],
        isNew: @escaping @Sendable ([SignInRequestRecord]) -> Bool,
        answer: @escaping @Sendable (Result<[SignInRequestRecord], any Error>) -> Void
    ) -> Bool {
        let deadline = ServerClock.monotonicNanoseconds().addingSaturating(
            UInt64(max(seconds, 0)).multipliedSaturating(by: 1_000_000_000))
        let waiter = Waiter(user: user, deadline: deadline, load: load, isNew: isNew, answer: answer)
        return state.withLock { state in
            guard state.waiters.count < maximumWaiters,
                state.waiters.values.lazy.filter({ $0.user == user }).count < maximumWaitersPerUser
            else { return false }
            state.waiters[state.nextID] = waiter
            state.nextID &+= 1
            if state.timer == nil { state.timer = startTimer() }
            return true
        }
    }

    /// Every ``checkInterval`` on the queue: every poll is checked, and the ones past their
    /// deadline answer.
    private func startTimer() -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + checkInterval, repeating: checkInterval, leeway: .milliseconds(50))
        timer.setEventHandler { [weak self] in self?.checkWaiters { _ in true } }
        timer.resume()
        return timer
    }

    /// Checks the waiters `selected` picks, answering those whose check found something, failed,
    /// or whose deadline passed; stops the timer when none waits. Runs on ``queue``.
    ///
    /// A check reads in a ``DurabilityScope`` of its own, and its answer waits until what the
    /// read may have seen is durable (a 503 if that fails): a request committed and not yet
    /// synced, or whose sync failed, is not shown to a device before it could survive a crash.
    private func checkWaiters(_ selected: (Waiter) -> Bool) {
        let now = ServerClock.monotonicNanoseconds()
        let candidates = state.withLock { state in state.waiters.filter { selected($0.value) } }
        for (id, waiter) in candidates {
            let (result, scope) = DurabilityScope.run { () -> Result<[SignInRequestRecord], any Error>? in
                do {
                    let requests = try waiter.load()
                    return waiter.isNew(requests) || now >= waiter.deadline ? .success(requests) : nil
                } catch {
                    return .failure(error)
                }
            }
            guard let result else { continue }
            let removed = state.withLock { state in
                let removed = state.waiters.removeValue(forKey: id) != nil
                if state.waiters.isEmpty {
                    state.timer?.cancel()
                    state.timer = nil
                }
                return removed
            }
            guard removed else { continue }
            if case .durable = scope.outcome {
                waiter.answer(result)
                continue
            }
            // The group commit's queue settles the scope; the answer goes back to this one.
            scope.whenDurable { [queue] failure in
                queue.async { waiter.answer(failure.map { .failure($0) } ?? result) }
            }
        }
    }
}
