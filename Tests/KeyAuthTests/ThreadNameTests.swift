import Foundation
import Synchronization
import Testing

@testable import KeyAuth

/// Thread names, which a stuck process's diagnostics (`/proc/PID/task/*/comm`, gdb) rely on.
@Suite("Thread names")
struct ThreadNameTests {
    /// The calling thread's name as the kernel reports it.
    private static func currentName() -> String? {
        (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
            .trimmingCharacters(in: .newlines)
    }

    @Test("a thread names itself, cut to the kernel's 15 bytes, and the thread that started it keeps its name")
    func namesTheCallingThread() async {
        let seen = Mutex<[String?]>([])
        let starterBefore = Self.currentName()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                ThreadName.setCurrent("keyauth-test")
                let short = Self.currentName()
                ThreadName.setCurrent("keyauth-a-much-longer-name")
                seen.withLock { $0 = [short, Self.currentName()] }
                continuation.resume()
            }
        }
        #expect(seen.withLock { $0 } == ["keyauth-test", "keyauth-a-much-"])
        #expect(Self.currentName() == starterBefore)
    }
}
