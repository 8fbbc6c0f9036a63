import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthCLI

/// The agent's certificate renewal schedule driven by a fake clock, agent and server: what it
/// fetches when, how long it sleeps after each outcome, and what it says. The built agent
/// renewing against a real server is in `SSHAgentTests`.
///
/// Each test takes milliseconds, but it awaits on Swift's cooperative pool, which on a 2-core
/// machine has two threads; in a full run, tests that wait synchronously for processes can hold
/// both for minutes (`.ci/run` once timed all six out after 60 s). The limit only guards
/// against a hang.
@Suite("ssh certificate renewal schedule", .timeLimit(.minutes(5)))
struct SSHCertificateRenewerTests {
    /// A fake agent, certificate file, server and clock. Sleeping moves the clock; after
    /// `sleepLimit` sleeps the running task is cancelled, which ends the renewer's loop.
    final class World: Sendable {
        struct State {
            var now = Date(timeIntervalSince1970: 1_800_000_000)
            var unlocked = true
            var validBefore: UInt64?
            /// `valid after` of the current certificate: by default one made 8 hours ago.
            var validAfter: UInt64 = 1_800_000_000 - 8 * 3600
            /// How long each certificate the fake server issues is valid from its fetch.
            var lifetime: Int64 = 8 * 3600
            /// The answers of the next fetches; once empty, every fetch renews.
            var answers: [SSHCertificateRenewer.Outcome] = []
            var fetchedAt: [TimeInterval] = []
            var sleeps: [TimeInterval] = []
            var said: [String] = []
        }

        let state: Mutex<State>
        let sleepLimit: Int

        init(sleepLimit: Int, _ configure: (inout State) -> Void = { _ in }) {
            var initial = State()
            configure(&initial)
            state = Mutex(initial)
            self.sleepLimit = sleepLimit
        }

        var start: TimeInterval { 1_800_000_000 }

        /// Runs a renewer against this world until its loop ends, and returns what happened.
        func run() async -> State {
            let renewer = SSHCertificateRenewer(
                serverURL: "https://auth.example.com", certificatePath: "/home/alice/device-key.pem-cert.pub",
                isUnlocked: { self.state.withLock { $0.unlocked } },
                certificateValidity: {
                    self.state.withLock { state in state.validBefore.map { (state.validAfter, $0) } }
                },
                fetch: { self.fetch() },
                log: { line in self.state.withLock { $0.said.append(line) } })
            await Task {
                await renewer.run(now: { self.state.withLock { $0.now } }) { seconds in
                    let count = self.state.withLock { state in
                        state.sleeps.append(seconds)
                        state.now += seconds
                        return state.sleeps.count
                    }
                    if count >= self.sleepLimit { withUnsafeCurrentTask { $0?.cancel() } }
                }
            }.value
            return state.withLock { $0 }
        }

        private func fetch() -> SSHCertificateRenewer.Outcome {
            state.withLock { state in
                state.fetchedAt.append(state.now.timeIntervalSince1970 - start)
                let answer =
                    state.answers.isEmpty
                    ? .renewed(validBefore: Int64(state.now.timeIntervalSince1970) + state.lifetime)
                    : state.answers.removeFirst()
                // As the real fetch does: a certificate is written only when one was issued.
                if case .renewed(let validBefore) = answer {
                    state.validBefore = UInt64(validBefore)
                    // As the server does: valid from 5 minutes before it was issued.
                    state.validAfter = UInt64(state.now.timeIntervalSince1970) - 300
                }
                return answer
            }
        }
    }

    @Test("a certificate is renewed once it expires within 10 minutes, and then left alone")
    func renewsWithinMargin() async {
        // Valid for 11 minutes: fine at the first check, within the margin at the second.
        let world = World(sleepLimit: 30) { $0.validBefore = 1_800_000_000 + 660 }
        let result = await world.run()
        #expect(result.fetchedAt == [60])
        #expect(result.sleeps == Array(repeating: 60, count: 30))
        #expect(result.said.count == 1)
        #expect(
            result.said.first?.hasPrefix("keyauth agent: ssh certificate renewed, valid until 2027-01-15T16:01:00Z")
                == true, "\(result.said)")
    }

    @Test("the margin is 10 minutes, or a quarter of a shorter certificate's validity; a missing one is needed")
    func needsCertificate() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let made: UInt64 = 1_800_000_000 - 8 * 3600
        #expect(SSHCertificateRenewer.needsCertificate(validity: nil, now: now))
        #expect(SSHCertificateRenewer.needsCertificate(validity: (made, 1_800_000_000 + 600), now: now))
        #expect(!SSHCertificateRenewer.needsCertificate(validity: (made, 1_800_000_000 + 601), now: now))
        #expect(!SSHCertificateRenewer.needsCertificate(validity: (made, UInt64.max), now: now))
        // Valid for 10 minutes in all: renewed in its last 150 s.
        let short: UInt64 = 1_800_000_000 - 450
        #expect(SSHCertificateRenewer.needsCertificate(validity: (short, 1_800_000_000 + 150), now: now))
        #expect(!SSHCertificateRenewer.needsCertificate(validity: (short - 1, 1_800_000_000 + 151), now: now))
        #expect(SSHCertificateRenewer.needsCertificate(validity: (1_800_000_000, 1_800_000_000), now: now))
    }

    @Test("certificates of 5 minutes are fetched every 3 minutes, not at every check")
    func shortCertificates() async {
        let world = World(sleepLimit: 10) { $0.lifetime = 300 }
        let result = await world.run()
        // Missing at first; then each is valid 300 s from its fetch, 600 s in all: renewed 150 s
        // before it ends, at the first check after that.
        #expect(result.fetchedAt == [0, 180, 360, 540], "\(result.fetchedAt)")
    }

    @Test("server failures are retried after 60 s, doubling to at most 10 minutes, each said with its wait")
    func backsOffAfterFailures() async {
        let world = World(sleepLimit: 7) { $0.answers = Array(repeating: .failed("connection refused"), count: 7) }
        let result = await world.run()
        // One fetch per sleep: never two tries without a wait between them.
        #expect(result.sleeps == [60, 120, 240, 480, 600, 600, 600])
        #expect(result.fetchedAt == [0, 60, 180, 420, 900, 1500, 2100])
        #expect(result.said.count == 7)
        #expect(
            result.said.first
                == "keyauth agent: cannot fetch an ssh certificate: connection refused; trying again in 60 s")
        #expect(result.said.last?.hasSuffix("trying again in 600 s") == true, "\(result.said)")
    }

    @Test("a renewal after failures resets the backoff")
    func renewalResetsBackoff() async {
        let world = World(sleepLimit: 6) { $0.answers = [.failed("timed out"), .failed("timed out")] }
        let result = await world.run()
        #expect(result.fetchedAt == [0, 60, 180])
        #expect(result.sleeps == [60, 120, 60, 60, 60, 60])
        #expect(result.said.last?.contains("ssh certificate renewed") == true, "\(result.said)")
    }

    @Test("a locked agent fetches nothing and looks every 2 seconds whether it was unlocked")
    func lockedAgentWaits() async {
        let world = World(sleepLimit: 20) { $0.unlocked = false }
        let result = await world.run()
        #expect(result.fetchedAt.isEmpty)
        #expect(result.sleeps == Array(repeating: 2, count: 20))
        #expect(result.said.isEmpty)
    }

    @Test("a server without an SSH CA is said once, asked again every 5 minutes, and a CA added later is used")
    func authorityAddedLater() async {
        let world = World(sleepLimit: 6) { $0.answers = [.notIssued, .notIssued, .notIssued] }
        let result = await world.run()
        #expect(result.fetchedAt == [0, 300, 600, 900])
        #expect(result.sleeps == [300, 300, 300, 60, 60, 60])
        #expect(
            result.said == [
                "keyauth agent: https://auth.example.com issues no SSH certificates; the agent offers the key "
                    + "alone and asks again every 300 s",
                "keyauth agent: ssh certificate renewed, valid until 2027-01-15T16:15:00Z "
                    + "(/home/alice/device-key.pem-cert.pub)",
            ])
    }
}
