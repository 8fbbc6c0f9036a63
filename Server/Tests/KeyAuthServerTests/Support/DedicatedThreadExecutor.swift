import Foundation
import Synchronization
import Testing

/// A task executor with a thread of its own, for synchronous test code that waits for minutes.
///
/// Swift Testing runs tests on the cooperative pool, one thread per core (two here). The two key
/// rotation checks of ``TokenConfusionTests`` wait some 270 s each for keys to retire, and
/// synchronously: in CI both ran at once and held both threads, and async client tests that had
/// started earlier could not resume until their 5-minute limit had passed. Code run through
/// ``run(_:_:)`` stays in the test's task (so `#expect` and the time limit apply as anywhere in
/// the test), but its synchronous stretches run on this thread, not the pool's.
final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    // `jobs` and `finished` are guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var finished = false

    private init(name: String) {
        let thread = Thread { [self] in runJobs() }
        thread.name = name
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Runs the jobs enqueued, in order, until ``finish()`` and none is left.
    private func runJobs() {
        while true {
            condition.lock()
            while jobs.isEmpty, !finished { condition.wait() }
            guard !jobs.isEmpty else {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// Lets the thread end once its jobs are done.
    private func finish() {
        condition.lock()
        finished = true
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` in the calling task, on a thread named `name` of its own.
    static func run<Result>(_ name: String, _ body: () throws -> Result) async throws -> Result {
        let executor = DedicatedThreadExecutor(name: name)
        defer { executor.finish() }
        return try await withTaskExecutorPreference(executor) { try await onTaskExecutor(body) }
    }

    /// Runs `body` where the task's executor preference says: `@concurrent`, because a
    /// nonisolated async function otherwise stays on its caller's executor (the test pool's).
    @concurrent private static func onTaskExecutor<Result>(_ body: () throws -> Result) async throws -> Result {
        try body()
    }
}

@Suite("Synchronous test code on a thread of its own")
struct DedicatedThreadExecutorTests {
    /// How many bodies have arrived at the rendezvous.
    private final class Arrivals: Sendable {
        let count = Atomic<Int>(0)
    }

    @Test("more blocking bodies than the test pool has threads all run at once")
    func bodiesDoNotHoldThePool() async throws {
        // One more than the cooperative pool's threads: on the pool, one could not start until
        // another ended, and none would see all arrive.
        let bodies = ProcessInfo.processInfo.activeProcessorCount + 1
        let arrivals = Arrivals()
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<bodies {
                group.addTask {
                    try await DedicatedThreadExecutor.run("rendezvous-\(index)") {
                        arrivals.count.add(1, ordering: .relaxed)
                        let deadline = Date().addingTimeInterval(10)
                        while arrivals.count.load(ordering: .relaxed) < bodies, Date() < deadline { usleep(1000) }
                        return arrivals.count.load(ordering: .relaxed) == bodies
                    }
                }
            }
            for try await allArrived in group { #expect(allArrived) }
        }
    }

    @Test("what the code expects is recorded against the test")
    func expectationsBelongToTheTest() async {
        await withKnownIssue("an expectation that fails on the dedicated thread") {
            try await DedicatedThreadExecutor.run("keyauth-dedicated") { #expect(Bool(false)) }
        }
    }
}
