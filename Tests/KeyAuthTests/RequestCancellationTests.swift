import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// Cancelling a request at the moment its answer arrives, as Control-C during `keyauth register`'s
/// wait for approval does. URLSession's own `async` API deadlocked there (swift-corelibs-foundation
/// issue 5412): the canceller held the Swift task's lock while waiting for URLSession's queue, and
/// that queue, handing over the answer, waited for the same lock. Both threads stopped for good,
/// and so did every signal handled after them.
///
/// The test takes seconds alone; its limit is long because its 100 rounds each wait for a thread
/// of the cooperative pool, which a full run's synchronous tests (servers, processes) can hold
/// for minutes on a 2-core machine (`.ci/run` once timed it out at 5 minutes). A deadlock is still
/// caught per round, after ``stuckAfter``.
@Suite("Cancelling a request while its answer arrives", .timeLimit(.minutes(10)))
struct RequestCancellationTests {
    /// How long a cancel, or the cancelled request, may take before the test calls it stuck: far
    /// beyond a loopback answer and the client's 5-second timeout, so only a deadlock reaches it.
    private static let stuckAfter: Duration = .seconds(30)

    /// What one round saw, set from other threads.
    private final class Round: Sendable {
        let cancelReturned = Mutex(false)
        let outcome = Mutex<String?>(nil)
    }

    @Test("a cancel at any point of a request returns, and the request ends")
    func cancelAsAnswersArrive() async throws {
        let server = try LoopbackHTTPResponder { _ in .json(200, "{\"devices\":[]}") }
        defer { server.stop() }
        let client = try KeyAuthClient(serverURL: server.url, timeout: 5)
        let token = AccessToken(value: "a.b.c", expiresAt: Date().addingTimeInterval(600))
        var outcomes: [String: Int] = [:]
        let rounds = 100
        for number in 0..<rounds {
            let round = Round()
            let request = Task { try await client.listDevices(accessToken: token) }
            Task {
                let outcome: String
                switch await request.result {
                case .success: outcome = "answered"
                case .failure(let error as KeyAuthError): outcome = error.code.rawValue
                case .failure(let error): outcome = "not a KeyAuthError: \(error)"
                }
                round.outcome.withLock { $0 = outcome }
            }
            // The cancel comes from a thread of its own, as the signal watcher's does, after a
            // delay that sweeps the request's lifetime (loopback answers take about a millisecond).
            let delay = UInt32(number % 30) * 100
            Thread.detachNewThread {
                usleep(delay)
                request.cancel()
                round.cancelReturned.withLock { $0 = true }
            }
            let cancelled = try await Self.waitUntil { round.cancelReturned.withLock { $0 } }
            try #require(cancelled, "round \(number): task.cancel() did not return; the request is deadlocked")
            let ended = try await Self.waitUntil { round.outcome.withLock { $0 != nil } }
            try #require(ended, "round \(number): the cancelled request never ended")
            outcomes[round.outcome.withLock { $0 } ?? "", default: 0] += 1
        }
        // Each request either got its answer or was cancelled; nothing else happened to it.
        #expect(Set(outcomes.keys).isSubset(of: ["answered", KeyAuthError.Code.cancelled.rawValue]), "\(outcomes)")
        #expect(outcomes.values.reduce(0, +) == rounds)
    }

    /// Polls `condition` until it holds or ``stuckAfter`` passes, without blocking a thread of the
    /// cooperative pool (a deadlock there may already hold one of its two threads).
    private static func waitUntil(_ condition: () -> Bool) async throws -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + stuckAfter
        while !condition() {
            guard clock.now < deadline else { return false }
            try await Task.sleep(for: .milliseconds(1))
        }
        return true
    }
}
