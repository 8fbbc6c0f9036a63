import Synchronization

/// The one login an ``AccessTokenProvider`` runs at a time, shared by every caller that needs a
/// token while it runs.
///
/// Without it, five parts of an app asking for a token at once made five logins: five presence
/// checks (five PIN prompts) and five assertions for one expired token. Callers that arrive
/// while a login runs wait for its outcome, success or error, instead of starting their own.
///
/// The login runs in a task of its own so that no one caller owns it: it is cancelled only when
/// every caller waiting for it has been cancelled.
final class LoginInFlight: Sendable {
    private struct State {
        var task: Task<AccessToken, any Error>?
        /// A login every waiter gave up on that may still run (a PIN prompt cannot be
        /// interrupted): the next login waits for it to end, so that two never prompt at once.
        var draining: Task<AccessToken, any Error>?
        /// Which login `task` is, so that a late caller never clears or cancels a newer one.
        var generation = 0
        var waiters = 0
    }

    private let state = Mutex(State())

    /// Waits for the login in flight, or starts one with `login` when none runs.
    ///
    /// - Throws: the login's ``KeyAuthError``; `.cancelled` when this caller was cancelled and
    ///   the login with it.
    func join(
        _ login: @escaping @Sendable () async throws(KeyAuthError) -> AccessToken
    ) async throws(KeyAuthError) -> AccessToken {
        while let draining = state.withLock({ $0.task == nil ? $0.draining : nil }) {
            _ = await draining.result
            state.withLock { if $0.draining == draining { $0.draining = nil } }
        }
        let (task, generation) = state.withLock { state in
            let task: Task<AccessToken, any Error>
            if let running = state.task {
                task = running
            } else {
                task = Task { try await login() }
                state.task = task
                state.generation += 1
                state.waiters = 0
            }
            state.waiters += 1
            return (task, state.generation)
        }
        let result = await withTaskCancellationHandler {
            await task.result
        } onCancel: {
            let nobodyWaits = state.withLock { state in
                guard state.generation == generation else { return false }
                state.waiters -= 1
                guard state.waiters == 0 else { return false }
                // Cancelled, the login may still be running (a PIN prompt cannot be interrupted):
                // a caller that comes now starts a login of its own once it ends, instead of
                // joining this one and getting its cancellation.
                state.draining = state.task
                state.task = nil
                return true
            }
            if nobodyWaits { task.cancel() }
        }
        // The login has ended: the next caller that needs a token starts a new one.
        state.withLock { state in
            if state.generation == generation { state.task = nil }
            if state.draining == task { state.draining = nil }
        }
        switch result {
        case .success(let token):
            return token
        case .failure(let error as KeyAuthError):
            throw error
        case .failure(let error):
            throw KeyAuthError(.cancelled, "the login was cancelled", underlying: error)
        }
    }
}
