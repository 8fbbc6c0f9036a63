import Foundation
import Synchronization
import Testing

@testable import KeyAuth

/// The login an `AccessTokenProvider` shares between the callers that need a token at once.
@Suite("One login in flight, shared", .timeLimit(.minutes(5)))
struct LoginInFlightTests {
    /// A login that, the first time, waits for ``release()`` whatever cancellation says, as a PIN
    /// prompt does; each login's token names its number.
    final class Logins: Sendable {
        let started = Atomic<Int>(0)
        private let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
        private let released = Atomic<Bool>(false)

        func login() async throws(KeyAuthError) -> AccessToken {
            let number = started.add(1, ordering: .sequentiallyConsistent).newValue
            if number == 1 {
                await withCheckedContinuation { continuation in
                    let resumeNow = gate.withLock { gate in
                        if released.load(ordering: .sequentiallyConsistent) { return true }
                        gate = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
            return AccessToken(value: "token-\(number)", expiresAt: Date().addingTimeInterval(600))
        }

        func release() {
            let waiting = gate.withLock { gate in
                released.store(true, ordering: .sequentiallyConsistent)
                defer { gate = nil }
                return gate
            }
            waiting?.resume()
        }
    }

    @Test(
        "a caller that comes after every waiter was cancelled starts a login of its own once the cancelled one ends")
    func cancelledLoginIsNotJoined() async throws {
        let flight = LoginInFlight()
        let logins = Logins()
        let first = Task { try await flight.join { () async throws(KeyAuthError) in try await logins.login() } }
        while logins.started.load(ordering: .sequentiallyConsistent) == 0 {
            try await Task.sleep(for: .milliseconds(5))
        }
        first.cancel()
        let second = Task { try await flight.join { () async throws(KeyAuthError) in try await logins.login() } }
        // Long enough for the second caller to join the first login, or start its own, if it
        // would: neither, while the first still prompts.
        try await Task.sleep(for: .milliseconds(200))
        #expect(logins.started.load(ordering: .sequentiallyConsistent) == 1)
        logins.release()
        #expect(try await second.value.value == "token-2")
        #expect(logins.started.load(ordering: .sequentiallyConsistent) == 2)
        _ = await first.result
    }
}
