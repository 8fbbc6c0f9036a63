import Foundation
import KeyAuthTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// An executable run as a person runs it in a terminal: in its own session, with a fresh
/// pseudo-terminal as its controlling terminal (so that `/dev/tty` is that terminal, and
/// Control-C typed into it sends SIGINT), standard output and error going to files.
///
/// The test holds the terminal (``PseudoTerminal``), so that it and its settings outlive the
/// process.
final class TerminalProcess: @unchecked Sendable {
    let pid: pid_t
    private let terminal: PseudoTerminal
    private let scratch: String
    private var exitStatus: Int32?

    init(_ path: String, _ arguments: [String], environment: [String: String]) throws {
        terminal = try PseudoTerminal()
        scratch = NSTemporaryDirectory() + "/keyauth-tty-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A new session without a controlling terminal: the first terminal it opens (standard
        // input below, opened without O_NOCTTY) becomes its controlling terminal, and its process
        // group the terminal's foreground group. 0x80 is POSIX_SPAWN_SETSID, which Glibc's module
        // hides behind _GNU_SOURCE. Signals start unblocked and at their defaults, whatever the
        // test runner's thread had.
        posix_spawnattr_setflags(&attributes, Int16(0x80 | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, terminal.path, O_RDWR, 0)
        posix_spawn_file_actions_addopen(&actions, 1, scratch + "/stdout", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, scratch + "/stderr", O_WRONLY | O_CREAT | O_TRUNC, 0o600)

        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, path, &actions, &attributes, argv, envp)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        pid = child
    }

    /// Types `text` into the terminal.
    func type(_ text: String) {
        terminal.send(text)
    }

    /// Reads what the terminal showed until `marker` appears, for at most `timeout` seconds.
    func readUntil(_ marker: String, timeout: TimeInterval = 20) -> String {
        var output = ""
        let deadline = Date().addingTimeInterval(timeout)
        while !output.contains(marker) && Date() < deadline {
            output += terminal.readAvailable(waiting: 50)
        }
        return output
    }

    /// What the terminal shows, waiting up to `milliseconds` for the first byte.
    func readAvailable(waiting milliseconds: Int32 = 0) -> String {
        terminal.readAvailable(waiting: milliseconds)
    }

    /// Whether the terminal echoes what is typed: what a prompt that turned echo off must
    /// restore.
    var echoIsOn: Bool { terminal.echoIsOn }

    /// Sends `signal` to the process.
    func signal(_ signal: Int32) {
        kill(pid, signal)
    }

    /// Waits up to `timeout` seconds for the exit and returns the status the shell would show
    /// (128 + the signal for a process a signal killed); kills the process and returns nil if it
    /// does not exit in time.
    func wait(timeout: TimeInterval = 20) -> Int32? {
        if let exitStatus { return exitStatus }
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while Date() < deadline {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift does not import.
                let signal = status & 0x7F
                exitStatus = signal == 0 ? (status >> 8) & 0xFF : 128 + signal
                return exitStatus
            }
            if result < 0 && errno != EINTR { return nil }
            usleep(20_000)
        }
        kill(pid, SIGKILL)
        _ = waitpid(pid, &status, 0)
        return nil
    }

    var standardOutput: String {
        (try? String(contentsOfFile: scratch + "/stdout", encoding: .utf8)) ?? ""
    }

    var standardError: String {
        (try? String(contentsOfFile: scratch + "/stderr", encoding: .utf8)) ?? ""
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
        }
        try? FileManager.default.removeItem(atPath: scratch)
    }
}
