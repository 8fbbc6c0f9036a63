import Foundation
import Synchronization
import Testing

@testable import KeyAuth

/// Threads whose creation can fail and say so (Foundation's `Thread` on Linux does not).
@Suite("Detached threads")
struct DetachedThreadTests {
    @Test("a started thread runs its work once, under its name")
    func runsTheWork() async {
        let name = Mutex<String?>(nil)
        let started = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let started = DetachedThread.start(name: "keyauth-detach") {
                name.withLock { $0 = Self.currentName() }
                continuation.resume(returning: true)
            }
            if !started { continuation.resume(returning: false) }
        }
        #expect(started)
        #expect(name.withLock { $0 } == "keyauth-detach")
    }

    @Test("a thread the system cannot make is reported, and its work never runs")
    func reportsAFailedCreation() async throws {
        let ran = Atomic<Bool>(false)
        // A 4 EiB stack: larger than any process's address space, whatever the overcommit policy.
        let started = DetachedThread.start(name: "keyauth-huge", stackBytes: 1 << 62) {
            ran.store(true, ordering: .releasing)
        }
        #expect(!started)
        try await Task.sleep(for: .milliseconds(100))
        let workRan = ran.load(ordering: .acquiring)
        #expect(!workRan)
    }

    @Test("blocking work answers on a thread of its own, and on the caller's when it cannot have one")
    func blockingWorkAnswersWithoutAThread() async {
        let onItsOwn = await BlockingWork.run(threadName: "keyauth-bwork") { Self.currentName() }
        #expect(onItsOwn == "keyauth-bwork")
        let inPlace = await BlockingWork.run(threadName: "keyauth-bwork", stackBytes: 1 << 62) { Self.currentName() }
        #expect(inPlace != nil)
        #expect(inPlace != "keyauth-bwork")
    }

    /// The calling thread's name as the kernel reports it.
    private static func currentName() -> String? {
        (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?.trimmingCharacters(in: .newlines)
    }
}
