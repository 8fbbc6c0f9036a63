import Dispatch
import Foundation
import Glibc
import Synchronization
import Testing

@testable import KeyAuthServer

/// `/healthz`'s write probe on its own, with a write and a clock the test controls.
@Suite("The storage write probe")
struct StorageWriteProbeTests {
    /// A write that counts its calls, fails while told to, and can be held mid-write.
    final class ScriptedWrite: Sendable {
        private struct State {
            var calls = 0
            var failing = false
            var held = false
            var inside = false
        }

        private let state = Mutex(State())

        var calls: Int { state.withLock { $0.calls } }
        func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
        func hold() { state.withLock { $0.held = true } }
        func release() { state.withLock { $0.held = false } }
        var isInside: Bool { state.withLock { $0.inside } }

        func write() throws(StorageError) {
            let failing = state.withLock { state in
                state.calls += 1
                state.inside = true
                return state.failing
            }
            while state.withLock({ $0.held }) { usleep(200) }
            state.withLock { $0.inside = false }
            if failing { throw StorageError(.queryFailed, "database or disk is full") }
        }
    }

    /// Monotonic nanoseconds that move only when told.
    final class ManualClock: Sendable {
        private let now = Atomic<UInt64>(1_000_000_000_000)
        var closure: @Sendable () -> UInt64 { { self.now.load(ordering: .relaxed) } }
        func advance(milliseconds: UInt64) { now.add(milliseconds * 1_000_000, ordering: .relaxed) }
    }

    /// A probe of a scripted write on a manual clock.
    private static func probe() -> (StorageWriteProbe, ScriptedWrite, ManualClock) {
        let write = ScriptedWrite()
        let clock = ManualClock()
        let probe = StorageWriteProbe(
            write: { () throws(StorageError) in try write.write() }, monotonicNanoseconds: clock.closure)
        return (probe, write, clock)
    }

    @Test("writes at most once a second however often it is asked, answering the rest from the last write")
    func rateLimited() {
        let (probe, write, clock) = Self.probe()
        for _ in 0..<100 { #expect(probe.check() == nil) }
        #expect(write.calls == 1)
        clock.advance(milliseconds: 999)
        for _ in 0..<100 { #expect(probe.check() == nil) }
        #expect(write.calls == 1)
        clock.advance(milliseconds: 1)
        #expect(probe.check() == nil)
        #expect(write.calls == 2)
    }

    @Test("reports a failed write until a later write succeeds")
    func reportsFailures() {
        let (probe, write, clock) = Self.probe()
        write.fail(true)
        #expect(probe.check()?.code == .queryFailed)
        write.fail(false)
        // Within the second, the failure stands: the disk was not tried again.
        #expect(probe.check()?.code == .queryFailed)
        clock.advance(milliseconds: 1000)
        #expect(probe.check() == nil)
        #expect(write.calls == 2)
    }

    // A guard against a hang, not a timing check: the waits inside are bounded at 30 s, and a test
    // queued behind busy workers of a full parallel run counts that time against its limit too.
    @Test("lets one probe write at a time, and counts a write hung for 5 s as failed", .timeLimit(.minutes(5)))
    func hungWrite() throws {
        let (probe, write, clock) = Self.probe()
        #expect(probe.check() == nil)
        clock.advance(milliseconds: 1000)
        write.hold()
        let first = DispatchSemaphore(value: 0)
        let succeeded = Atomic<Bool>(false)
        Thread {
            succeeded.store(probe.check() == nil, ordering: .relaxed)
            first.signal()
        }.start()
        // Bounded, so that a thread that never starts fails the test by name instead of holding
        // a worker until the time limit.
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while !write.isInside && ContinuousClock.now < deadline { usleep(200) }
        guard write.isInside else {
            write.release()
            Issue.record("the first probe's write did not start within 30 s")
            return
        }
        // The others do not write: they answer from the last write, until it has hung for 5 s.
        clock.advance(milliseconds: 4999)
        #expect(probe.check() == nil)
        clock.advance(milliseconds: 1)
        #expect(probe.check()?.code == .unavailable)
        #expect(write.calls == 2)
        write.release()
        #expect(first.wait(timeout: .now() + 30) == .success, "the first probe did not return")
        let firstSucceeded = succeeded.load(ordering: .relaxed)
        #expect(firstSucceeded)
        // The write came back: its outcome is the answer again.
        #expect(probe.check() == nil)
    }

    @Test("names its row after the host, as uname(2) names it")
    func instanceName() {
        var system = utsname()
        uname(&system)
        let nodeName = withUnsafeBytes(of: &system.nodename) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        #expect(StorageWriteProbe.instanceName() == nodeName)
    }
}
