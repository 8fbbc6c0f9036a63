import Dispatch
import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The tests' one way of starting a program (``ChildProcess``), checked against what hung the
/// suite with Foundation's `Process`: an exit never seen while a sibling spawned at the same
/// moment lived on, descriptors leaking into children, a blocked SIGTERM passed on, a wait
/// without end.
@Suite("Child processes of the tests", .timeLimit(.minutes(10)))
struct ChildProcessTests {
    @Test("every exit is seen while long-lived children spawned at the same moment by other threads run on")
    func exitsSeenBesideConcurrentSpawns() throws {
        let failures = Mutex<[String]>([])
        let threads = DispatchGroup()
        for thread in 0..<4 {
            threads.enter()
            Thread.detachNewThread {
                defer { threads.leave() }
                var siblings: [ChildProcess] = []
                for round in 0..<8 {
                    do {
                        // A sibling started beside each short child, as another test's server is.
                        siblings.append(try ChildProcess("/bin/sleep", ["120"], environment: [:]))
                        let code = Int32(thread * 8 + round)
                        let short = try ChildProcess("/bin/sh", ["-c", "exit \(code)"], environment: [:])
                        let seen = short.wait(timeout: 60)
                        if seen != .exited(code) {
                            failures.withLock {
                                $0.append("thread \(thread), round \(round): \(String(describing: seen))")
                            }
                        }
                    } catch {
                        failures.withLock { $0.append("thread \(thread), round \(round): \(error)") }
                    }
                }
                let stillRunning = siblings.filter(\.isRunning).count
                if stillRunning != siblings.count {
                    failures.withLock { $0.append("thread \(thread): only \(stillRunning) siblings ran on") }
                }
                for sibling in siblings { sibling.kill() }
            }
        }
        try #require(threads.wait(timeout: .now() + 150) == .success, "a spawning thread never finished")
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
    }

    @Test("a child inherits no descriptor but 0, 1 and 2, even one the test process left open across exec")
    func onlyStandardDescriptors() throws {
        var ends: [Int32] = [-1, -1]
        try #require(pipe(&ends) == 0)
        defer { ends.forEach { close($0) } }
        // Plain pipe(): no FD_CLOEXEC, exactly what a careless library leaves open.
        #expect(fcntl(ends[1], F_GETFD) & FD_CLOEXEC == 0)
        let child = try ChildProcess("/bin/sleep", ["120"], environment: [:], standardInput: .descriptor(ends[0]))
        defer { child.kill() }
        // posix_spawn returns after the exec, so the table is the program's.
        let inherited = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.processID)/fd").sorted()
        #expect(inherited == ["0", "1", "2"])
        // Standard input is the pipe given on purpose, not a copy of the write end.
        let input = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(child.processID)/fd/0")
        let readEnd = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(ends[0])")
        #expect(input == readEnd)
    }

    @Test("a child starts with no signal blocked or ignored, whatever the spawning thread had")
    func defaultSignals() throws {
        var blocked = sigset_t()
        var previous = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGTERM)
        sigaddset(&blocked, SIGINT)
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        let run = try ChildProcess.run("/bin/grep", ["^Sig[BI]", "/proc/self/status"], environment: [:])
        #expect(run.termination == .exited(0))
        // "SigBlk:\t<hex mask>" and "SigIgn:\t<hex mask>", bit n - 1 for signal n.
        var masks: [String: UInt64] = [:]
        for line in run.standardOutput.split(separator: "\n") {
            let fields = line.split(separator: "\t")
            if fields.count == 2 { masks[String(fields[0])] = UInt64(fields[1], radix: 16) }
        }
        #expect(masks["SigBlk:"] == 0, "\(run.standardOutput)")
        // glibc's posix_spawn leaves its two internal real-time signals (33 and 34) ignored; the
        // standard signals must all be at their defaults.
        #expect(masks["SigIgn:"].map { $0 & 0x7fff_ffff } == 0, "\(run.standardOutput)")
    }

    @Test("exits and signals come back as a shell shows them, and the working directory is the one given")
    func terminations() throws {
        let exited = try ChildProcess.run("/bin/sh", ["-c", "exit 3"], environment: [:])
        #expect(exited.termination == .exited(3))
        #expect(exited.termination.status == 3)
        let killed = try ChildProcess.run("/bin/sh", ["-c", "kill -KILL $$"], environment: [:])
        #expect(killed.termination == .signaled(SIGKILL))
        #expect(killed.termination.status == 137)
        let directory = TemporaryDirectory("keyauth-child-test")
        defer { directory.remove() }
        let pwd = try ChildProcess.run(
            "/bin/sh", ["-c", "pwd; cat"], environment: [:], standardInput: "typed", currentDirectory: directory.path)
        #expect(pwd.standardOutput == directory.path + "\ntyped")
    }

    @Test("a child still running at its deadline is stopped, and the run fails saying so")
    func timeoutStopsAndReports() throws {
        let failure = #expect(throws: TestFailure.self) {
            // Time enough for the echo even on a loaded machine.
            try ChildProcess.run("/bin/sh", ["-c", "echo started; exec sleep 120"], environment: [:], timeout: 5)
        }
        #expect(failure?.description.contains("was stopped (signal \(SIGTERM)) because it ran for 5 s") == true)
        #expect(failure?.description.contains("started") == true, "what it wrote so far is shown")

        let child = try ChildProcess("/bin/sleep", ["120"], environment: [:])
        #expect(child.wait(timeout: 0.2) == nil)
        #expect(child.isRunning)
        #expect(child.stop() == .signaled(SIGTERM))
        #expect(!child.isRunning)
        #expect(!Self.isAlive(child.processID))
    }

    @Test("a child that ignores SIGTERM is killed after the grace period, with its group")
    func stopEscalates() throws {
        // The shell and its sleep both ignore SIGTERM (an ignored signal stays ignored across
        // exec); the sleep's id, written once both do, says the trap is set.
        let (child, grandchild) = try Self.shellWithSleep(before: "trap '' TERM; ", after: "; wait")
        #expect(child.stop(grace: 0.5) == .signaled(SIGKILL))
        #expect(Self.waitUntilGone(grandchild))
    }

    @Test("stopping a child with a group of its own ends what it started; so does its own exit")
    func groupsEndTogether() throws {
        let (stopped, stoppedGrandchild) = try Self.shellWithSleep(after: "; wait")
        stopped.stop()
        #expect(Self.waitUntilGone(stoppedGrandchild))

        let (exiting, leftBehind) = try Self.shellWithSleep()
        #expect(exiting.wait(timeout: 30) == .exited(0))
        #expect(Self.waitUntilGone(leftBehind))
    }

    @Test("a wait ends when the waiting task is cancelled, as a test's time limit cancels it")
    func cancelledWait() async throws {
        // An hour, not two minutes: under a full parallel suite this task can wait minutes for a
        // thread of the cooperative pool, and a child that ended on its own meanwhile would be
        // reported as ended (which it then is).
        let child = try ChildProcess("/bin/sleep", ["3600"], environment: [:])
        defer { child.kill() }
        let waiting = Task { child.wait(timeout: 3600) }
        waiting.cancel()
        #expect(await waiting.value == nil)
        #expect(child.isRunning)
    }

    /// A shell in a group of its own that runs `before`, starts `sleep 120` in the background
    /// and runs `after`, and the sleep's process id, once the shell has written it.
    private static func shellWithSleep(before: String = "", after: String = "") throws -> (ChildProcess, pid_t) {
        let directory = TemporaryDirectory("keyauth-child-test")
        defer { directory.remove() }
        let path = directory.path + "/sleep"
        let shell = try ChildProcess(
            "/bin/sh", ["-c", "\(before)sleep 120 & echo $! > \(path)\(after)"], environment: [:],
            grouping: .ownGroup)
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while ContinuousClock.now < deadline {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if text.hasSuffix("\n"), let id = pid_t(text.dropLast()) { return (shell, id) }
            usleep(10_000)
        }
        throw TestFailure("the shell wrote no process id")
    }

    /// Whether `processID` names a live process: one that exists and is not a zombie waiting for
    /// a parent (in a container, the process that adopts orphans may never reap them).
    private static func isAlive(_ processID: pid_t) -> Bool {
        guard kill(processID, 0) == 0 else { return false }
        let stat = (try? String(contentsOfFile: "/proc/\(processID)/stat", encoding: .utf8)) ?? ""
        // The state follows the command name, which is in parentheses.
        guard let close = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first != "Z"
    }

    /// Whether `processID` is gone within 30 s.
    private static func waitUntilGone(_ processID: pid_t) -> Bool {
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while isAlive(processID) {
            guard ContinuousClock.now < deadline else { return false }
            usleep(10_000)
        }
        return true
    }
}
