internal import CKeyAuthSpawn
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process of a test: the one way the tests start a program.
///
/// Foundation's `Process` is not used, for what it did to this suite on Linux. It learns of a
/// child's exit through a socket that the child inherits, and any process spawned at the same
/// moment by another test running in parallel may inherit that socket too: `waitUntilExit()` then
/// waited for ever for a child that had long exited, a zombie (swift-corelibs-foundation issue
/// 4795, seen with `TPMEndToEndTests` and `pg_ctlcluster`). It also hands the spawning thread's
/// signal mask to the child, and a test's thread, a dispatch worker, blocks nearly every signal:
/// Apache inherited a blocked SIGTERM and ignored its stop.
///
/// So a child here is started with `posix_spawn` and
/// - inherits no descriptor but its three standard streams (each `/dev/null`, a file, a terminal
///   or a descriptor given on purpose): everything from 3 up is closed in the child
///   (`posix_spawn_file_actions_addclosefrom_np`), whatever flags the test process's
///   descriptors carry;
/// - starts with no signal blocked and every signal at its default disposition;
/// - is waited for with `waitpid` on its own process id, never through a descriptor;
/// - is waited for only up to a deadline, and less when the waiting test's task is cancelled,
///   which is what a test's time limit does: a child that never exits fails its test by name
///   instead of stalling the run;
/// - is killed and reaped when its owner lets it go while it runs, so that none outlives its test.
///
/// A child in a process group or session of its own (``Grouping``) is stopped and killed with
/// its whole group, and when it ends, whatever it left in its group is killed, so that workers
/// or browsers it started go with it.
public final class ChildProcess: Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// `/dev/null`.
        case nullDevice
        /// A file: read for standard input; created (mode 0600) or truncated for an output.
        case file(String)
        /// A file an output is appended to, created (mode 0600) when missing.
        case appending(String)
        /// A terminal device (`/dev/pts/N`), opened for reading and writing. In a child with a
        /// session of its own, the first one opened becomes its controlling terminal.
        case terminal(String)
        /// A descriptor of the test process, such as a pipe's end, given to the child on purpose.
        case descriptor(Int32)
    }

    /// The process group the child runs in.
    public enum Grouping: Sendable {
        /// The test process's group: Control-C typed at `swift test` reaches the child too.
        case inherited
        /// A group of its own, so that stopping the child reaches everything it started.
        case ownGroup
        /// A session of its own (and so a group): a terminal it opens becomes its controlling
        /// terminal, and Control-C typed there goes to it alone.
        case ownSession
    }

    /// How a child ended.
    public enum Termination: Equatable, Sendable, CustomStringConvertible {
        /// It exited with this status. `-1` means the status was lost: something else in the test
        /// process reaped the child first.
        case exited(Int32)
        /// A signal it did not handle ended it.
        case signaled(Int32)

        /// Decodes what `waitid` reports of an ended child: `CLD_EXITED` with its status, else the
        /// signal that ended it.
        init(childInformation information: siginfo_t) {
            let status = information._sifields._sigchld.si_status
            self = information.si_code == CLD_EXITED ? .exited(status) : .signaled(status)
        }

        /// Decodes a `waitpid` status (`WIFEXITED`, `WEXITSTATUS` and `WTERMSIG` are macros that
        /// Swift does not import).
        init(waitStatus: Int32) {
            let signal = waitStatus & 0x7f
            self = signal == 0 ? .exited((waitStatus >> 8) & 0xff) : .signaled(signal)
        }

        /// The status as a shell reports it in `$?`: the exit status, or 128 + the signal.
        public var status: Int32 {
            switch self {
            case .exited(let status): status
            case .signaled(let signal): 128 + signal
            }
        }

        public var description: String {
            switch self {
            case .exited(let status): "exit status \(status)"
            case .signaled(let signal): "signal \(signal)"
            }
        }
    }

    /// The child's process id (also its group's id unless ``Grouping/inherited``).
    public let processID: Glibc.pid_t
    /// The program, for messages.
    public let executable: String
    private let grouping: Grouping
    /// Set once the child has been reaped. From then on its id may belong to another process, so
    /// no signal is sent to it any more.
    private let reaped = Mutex<Termination?>(nil)
    /// A descriptor for this very process (`pidfd_open`), through which it is looked at, signalled
    /// and reaped: unlike its id, it cannot come to name another process when something else in
    /// the test process reaps the child and the id is reused (Linux recycles ids below
    /// `pid_max`, 32768 on small machines). -1 when the kernel has no pidfds; ids are used then.
    private let descriptor: Int32

    /// Starts `executable` (a path, not looked up in `PATH`) with `arguments` and exactly the
    /// variables of `environment`.
    ///
    /// - Parameters:
    ///   - currentDirectory: the child's working directory; the test process's when nil.
    ///   - grouping: the child's process group; the test process's by default.
    /// - Throws: ``TestFailure`` naming the program and the error when it cannot be started
    ///   (missing, not executable, a stream's file cannot be opened).
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String],
        standardInput: Stream = .nullDevice, standardOutput: Stream = .nullDevice, standardError: Stream = .nullDevice,
        currentDirectory: String? = nil, grouping: Grouping = .inherited
    ) throws {
        self.executable = executable
        self.grouping = grouping
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var failure: Int32 = 0
        for (descriptor, stream) in [(Int32(0), standardInput), (1, standardOutput), (2, standardError)] {
            let result: Int32
            let output = O_WRONLY | O_CREAT
            switch stream {
            case .nullDevice:
                result = posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_RDWR, 0)
            case .file(let path):
                let flags = descriptor == 0 ? O_RDONLY : output | O_TRUNC
                result = posix_spawn_file_actions_addopen(&actions, descriptor, path, flags, 0o600)
            case .appending(let path):
                result = posix_spawn_file_actions_addopen(&actions, descriptor, path, output | O_APPEND, 0o600)
            case .terminal(let path):
                result = posix_spawn_file_actions_addopen(&actions, descriptor, path, O_RDWR, 0)
            case .descriptor(let source):
                result = posix_spawn_file_actions_adddup2(&actions, source, descriptor)
            }
            if failure == 0 { failure = result }
        }
        // After the three streams are in place: nothing else reaches the child.
        if failure == 0 { failure = posix_spawn_file_actions_addclosefrom_np(&actions, 3) }
        if failure == 0, let currentDirectory {
            failure = posix_spawn_file_actions_addchdir_np(&actions, currentDirectory)
        }

        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var everySignal = sigset_t()
        sigfillset(&everySignal)
        posix_spawnattr_setsigdefault(&attributes, &everySignal)
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        switch grouping {
        case .inherited: break
        case .ownGroup:
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        case .ownSession:
            flags |= POSIX_SPAWN_SETSID
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var processID: pid_t = 0
        if failure == 0 { failure = posix_spawn(&processID, executable, &actions, &attributes, argv, envp) }
        guard failure == 0 else {
            throw TestFailure("cannot start \(executable): \(String(cString: strerror(failure)))")
        }
        self.processID = processID
        descriptor = keyauth_pidfd_open(processID)
    }

    deinit {
        kill()
        if descriptor >= 0 { close(descriptor) }
    }

    /// What the kernel says the pidfd refers to (`/proc/self/fdinfo`), for failure messages: a
    /// signal that seems ignored may have gone to another process if the descriptor changed.
    public var descriptorDiagnostics: String {
        guard descriptor >= 0 else { return "no pidfd; signals go to pid \(processID)" }
        let information = (try? String(contentsOfFile: "/proc/self/fdinfo/\(descriptor)", encoding: .utf8)) ?? ""
        let target = information.split(separator: "\n").first { $0.hasPrefix("Pid:") } ?? "no Pid line"
        return "pidfd \(descriptor) for pid \(processID): \(target)"
    }

    /// `waitid`'s `P_PIDFD`, which Glibc's headers do not name.
    private static let byPIDFD = idtype_t(rawValue: 3)

    /// Whether the child has not exited yet. It is not reaped here, so its id stays its own.
    public var isRunning: Bool { reaped.withLock { $0 == nil && !hasExited() } }

    /// How the child ended, once it has (reaping it); nil while it runs.
    public var termination: Termination? { reaped.withLock { reapIfExited(&$0) } }

    /// Waits up to `timeout` seconds for the child to end and returns how it did; nil when it
    /// still runs at the deadline, or as soon as the waiting task is cancelled (a test's time
    /// limit). The child is left running: ``stop(_:grace:)`` or ``kill()`` ends it.
    public func wait(timeout: TimeInterval) -> Termination? {
        let deadline = ContinuousClock.now.advanced(by: .seconds(timeout))
        // Short pauses first (most children are quick commands), then at most 20 ms between looks.
        var pause: UInt32 = 500
        while true {
            if let termination { return termination }
            guard ContinuousClock.now < deadline, !Task.isCancelled else { return nil }
            usleep(pause)
            pause = min(pause * 2, 20_000)
        }
    }

    /// Sends `signal` to the child alone (not its group), unless it has already been reaped.
    public func signal(_ signal: Int32) {
        reaped.withLock { reaped in
            if reaped == nil { send(signal, toGroup: false) }
        }
    }

    /// Stops the child: `signal` to it (to its group when it has one), SIGKILL when it has not
    /// ended `grace` seconds later (or when the waiting task is cancelled), then reaps it.
    @discardableResult
    public func stop(_ signal: Int32 = SIGTERM, grace: TimeInterval = 10) -> Termination {
        reaped.withLock { reaped in
            if reaped == nil, !hasExited() { send(signal, toGroup: grouping != .inherited) }
        }
        return wait(timeout: grace) ?? kill()
    }

    /// Kills the child (its group when it has one) with SIGKILL, unless it has ended, and reaps it.
    @discardableResult
    public func kill() -> Termination {
        reaped.withLock { reaped in
            if let reaped { return reaped }
            if let termination = reapIfExited(&reaped) { return termination }
            send(SIGKILL, toGroup: grouping != .inherited)
            // SIGKILL cannot be caught: the wait is short (a process in an uninterruptible sleep
            // ends when that sleep does).
            return reap(&reaped)
        }
    }

    /// Sends `signal` to the child, or to its group when `toGroup`. Called with the lock held,
    /// while the child is not reaped: a zombie child keeps its id and its group's, so neither can
    /// name another process yet. Through the pidfd the child alone is certain to be reached even
    /// if something else reaped it meanwhile.
    private func send(_ signal: Int32, toGroup: Bool) {
        if toGroup {
            Glibc.kill(-processID, signal)
        } else if descriptor >= 0 {
            _ = keyauth_pidfd_send_signal(descriptor, signal)
        } else {
            Glibc.kill(processID, signal)
        }
    }

    /// Reaps the child if it has exited, after killing whatever is left in its own group (the
    /// zombie child still holds the group's id, so the signal cannot reach anyone else). Called
    /// with the lock held.
    private func reapIfExited(_ reaped: inout Termination?) -> Termination? {
        if let reaped { return reaped }
        guard hasExited() else { return nil }
        if grouping != .inherited { Glibc.kill(-processID, SIGKILL) }
        return reap(&reaped)
    }

    /// Waits for the child and records how it ended. Called with the lock held, once the child
    /// has exited or been sent SIGKILL.
    private func reap(_ reaped: inout Termination?) -> Termination {
        let termination: Termination
        if descriptor >= 0 {
            // waitid through the pidfd reaps this process and no other, even if its id was reused.
            var information = siginfo_t()
            var result: Int32
            repeat {
                result = waitid(Self.byPIDFD, id_t(descriptor), &information, WEXITED)
            } while result < 0 && errno == EINTR
            termination = result == 0 ? Termination(childInformation: information) : .exited(-1)
        } else {
            var status: Int32 = 0
            var result: pid_t
            repeat { result = waitpid(processID, &status, 0) } while result < 0 && errno == EINTR
            termination = result == processID ? Termination(waitStatus: status) : .exited(-1)
        }
        reaped = termination
        return termination
    }

    /// Whether the child, not yet reaped here, has exited: `waitid` with `WNOWAIT` looks without
    /// reaping, so the id stays reserved for the zombie.
    private func hasExited() -> Bool {
        var information = siginfo_t()
        let (kind, id) = descriptor >= 0 ? (Self.byPIDFD, id_t(descriptor)) : (P_PID, id_t(processID))
        while true {
            // Linux fills in SIGCHLD when it reports a child, and zeroes the record when WNOHANG
            // finds none.
            let result = waitid(kind, id, &information, WEXITED | WNOHANG | WNOWAIT)
            if result == 0 { return information.si_signo == SIGCHLD }
            if errno != EINTR { return true }  // ECHILD: not ours to wait for any more
        }
    }
}

extension ChildProcess {
    /// Runs `executable` to completion with `standardInput` as its input and files for its output
    /// (no pipe can fill up and stall it), and returns how it ended and what it wrote.
    ///
    /// - Parameters:
    ///   - timeout: seconds the program may run; then it is stopped (SIGTERM, then SIGKILL) and
    ///     the run fails.
    /// - Throws: ``TestFailure`` when the program cannot start, or when it is still running at
    ///   the deadline or when the test's time limit cancels the wait (with what it wrote so far).
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String], standardInput: String = "",
        currentDirectory: String? = nil, grouping: Grouping = .inherited, timeout: TimeInterval = 60
    ) throws -> (termination: Termination, standardOutput: String, standardError: String) {
        let scratch = TemporaryDirectory("keyauth-child")
        defer { scratch.remove() }
        let input = scratch.path + "/stdin"
        let output = scratch.path + "/stdout"
        let error = scratch.path + "/stderr"
        try Data(standardInput.utf8).write(to: URL(fileURLWithPath: input))
        let child = try ChildProcess(
            executable, arguments, environment: environment, standardInput: .file(input),
            standardOutput: .file(output), standardError: .file(error), currentDirectory: currentDirectory,
            grouping: grouping)
        let finished = child.wait(timeout: timeout)
        let termination = finished ?? child.stop(grace: 5)
        // Decoded leniently: a program's output need not be UTF-8.
        let written = String(decoding: FileManager.default.contents(atPath: output) ?? Data(), as: UTF8.self)
        let diagnostics = String(decoding: FileManager.default.contents(atPath: error) ?? Data(), as: UTF8.self)
        guard finished != nil else {
            let reason = Task.isCancelled ? "the test's time limit ran out" : "it ran for \(Int(timeout)) s"
            throw TestFailure(
                "\(([executable] + arguments).joined(separator: " ")) was stopped (\(termination)) because \(reason)"
                    + "\nstandard output:\n\(written)\nstandard error:\n\(diagnostics)")
        }
        return (termination, written, diagnostics)
    }
}
