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
final class TerminalProcess: Sendable {
    private let child: ChildProcess
    private let terminal: PseudoTerminal
    private let scratch: TemporaryDirectory

    /// Starts `path` in a new session whose controlling terminal is a fresh pseudo-terminal: its
    /// standard input, opened first (without O_NOCTTY), makes it so, and the child's process
    /// group becomes the terminal's foreground group.
    init(_ path: String, _ arguments: [String], environment: [String: String]) throws {
        terminal = try PseudoTerminal()
        scratch = TemporaryDirectory("keyauth-tty")
        child = try ChildProcess(
            path, arguments, environment: environment, standardInput: .terminal(terminal.path),
            standardOutput: .file(scratch.path + "/stdout"), standardError: .file(scratch.path + "/stderr"),
            grouping: .ownSession)
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
        child.signal(signal)
    }

    /// Waits up to `timeout` seconds for the exit and returns the status the shell would show
    /// (128 + the signal for a process a signal killed); kills the process and returns nil if it
    /// does not exit in time.
    func wait(timeout: TimeInterval = 20) -> Int32? {
        guard let termination = child.wait(timeout: timeout) else {
            child.kill()
            return nil
        }
        return termination.status
    }

    var standardOutput: String {
        (try? String(contentsOfFile: scratch.path + "/stdout", encoding: .utf8)) ?? ""
    }

    var standardError: String {
        (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
    }

    deinit {
        child.kill()
        scratch.remove()
    }
}
