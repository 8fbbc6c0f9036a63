import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The count of wrong PINs when the disk cannot take the reset after a right PIN: the right PIN
/// still works, and the count never holds fewer failures than there were.
///
/// Each test takes milliseconds; the limit only guards against a hang. It is long because a
/// full run's tests that wait synchronously (servers, processes) can hold both threads of the
/// cooperative pool for minutes on a 2-core machine, and these then wait for one (`.ci/run`
/// once timed them out at 2 minutes).
@Suite("PIN attempt counter on a failing disk", .timeLimit(.minutes(10)))
struct PINAttemptCounterTests {
    /// Turned on by a test's body, after the +1 was written: from then on every `fsync` fails.
    private final class Fault: Sendable {
        let on = Mutex(false)
    }

    private let directory = ScratchDirectory("keyauth-attempts")
    private let clock = TestClock(1_700_000_000)
    private var attemptsFile: String { "\(directory.path)/pin-attempts" }

    private func counter(failingAfter fault: Fault) -> PINAttemptCounter {
        let calls = SecureFile.DurabilityCalls(fsync: { descriptor in
            guard fault.on.withLock({ $0 }) else { return Glibc.fsync(descriptor) }
            errno = ENOSPC
            return -1
        })
        return PINAttemptCounter(attemptsFile: attemptsFile, clock: clock.clock, durability: calls)
    }

    @Test("a right PIN whose reset cannot be written still succeeds, and says so")
    func resetFailureDoesNotFailTheRightPIN() throws {
        let fault = Fault()
        let counter = counter(failingAfter: fault)
        var warnings: [String] = []
        let value = try counter.counting(warning: { warnings.append($0) }) { () throws(KeyAuthError) in
            fault.on.withLock { $0 = true }
            return 42
        }
        #expect(value == 42)
        #expect(warnings.count == 1)
        #expect(warnings.first?.contains("the PIN was right, but the count of wrong PINs could not be reset") == true)
    }

    @Test("the reset after a right PIN removes the attempts file, which needs no free space")
    func resetRemovesTheFile() throws {
        let counter = PINAttemptCounter(attemptsFile: attemptsFile, clock: clock.clock)
        #expect(throws: KeyAuthError.self) {
            try counter.counting { () throws(KeyAuthError) -> Int in throw KeyAuthError(.wrongPIN, "wrong") }
        }
        #expect(try AttemptStore(path: attemptsFile).load().failures == 1)
        var warnings: [String] = []
        let value = try counter.counting(warning: { warnings.append($0) }) { () throws(KeyAuthError) in 7 }
        #expect(value == 7)
        #expect(warnings.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: attemptsFile))
        #expect(try AttemptStore(path: attemptsFile).load().failures == 0)
    }

    @Test("a wrong PIN is counted before the key is tried, and a failing write stops the try")
    func countedBeforeTheKeyIsTried() throws {
        let counter = PINAttemptCounter(attemptsFile: attemptsFile, clock: clock.clock)
        let seen = try counter.counting { () throws(KeyAuthError) in
            try AttemptStore(path: attemptsFile).load().failures
        }
        #expect(seen == 1)

        let fault = Fault()
        fault.on.withLock { $0 = true }
        var tried = false
        let error = #expect(throws: KeyAuthError.self) {
            try self.counter(failingAfter: fault).counting { () throws(KeyAuthError) in tried = true }
        }
        #expect(error?.code == .storageFailed)
        #expect(!tried)
    }
}
