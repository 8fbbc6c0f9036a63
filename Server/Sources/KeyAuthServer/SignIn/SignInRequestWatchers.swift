import Dispatch
import Synchronization

/// The long polls of `GET /v1/auth-requests?wait=SECONDS` on this instance: each waits until a
/// request for its user appears, checking storage once a second (so that a request made on
/// another instance of a multi-instance deployment is seen within about a second) and at once
/// when one is made here.
///
/// A waiting request holds one of libmicrohttpd's worker threads, since the transport answers
/// synchronously. So only ``maximumWaiters`` may wait at once (a quarter of the pool by
/// default); a further long poll is answered at once with the current list, and the client
/// polls again a few seconds later.
final class SignInRequestWatchers: Sendable {
    private struct State {
        var waiting = 0
        var signals: [String: [ObjectIdentifier: DispatchSemaphore]] = [:]
    }

    /// Long polls allowed to wait at once.
    let maximumWaiters: Int
    private let state = Mutex(State())

    /// - Parameter maximumWaiters: long polls allowed to wait at once; 0 answers every one at once.
    init(maximumWaiters: Int) {
        self.maximumWaiters = max(maximumWaiters, 0)
    }

    /// The long polls waiting now.
    var waiting: Int { state.withLock { $0.waiting } }

    /// Wakes the long polls of `user` on this instance.
    func notify(user: String) {
        let signals = state.withLock { $0.signals[user].map { Array($0.values) } ?? [] }
        for signal in signals { signal.signal() }
    }

    /// Calls `isSatisfied` now, then once a second and whenever ``notify(user:)`` names `user`,
    /// until it returns true or `seconds` pass.
    ///
    /// - Returns: false when no waiting place was free and `isSatisfied` ran only once.
    /// - Throws: what `isSatisfied` throws.
    @discardableResult
    func wait(user: String, seconds: Int, until isSatisfied: () throws -> Bool) throws -> Bool {
        let signal = DispatchSemaphore(value: 0)
        let key = ObjectIdentifier(signal)
        let admitted = state.withLock { state in
            guard state.waiting < maximumWaiters else { return false }
            state.waiting += 1
            state.signals[user, default: [:]][key] = signal
            return true
        }
        guard admitted else {
            _ = try isSatisfied()
            return false
        }
        defer {
            state.withLock { state in
                state.waiting -= 1
                state.signals[user]?[key] = nil
                if state.signals[user]?.isEmpty == true { state.signals[user] = nil }
            }
        }
        let deadline = DispatchTime.now() + .seconds(seconds)
        while try !isSatisfied() {
            let now = DispatchTime.now()
            guard now < deadline else { break }
            let step = min(deadline, now + .seconds(1))
            _ = signal.wait(timeout: step)
        }
        return true
    }
}
