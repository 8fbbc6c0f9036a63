import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One run of a command, in-process or as an executable: its status and both output streams.
public struct CommandResult: Sendable {
    /// The exit status.
    public let status: Int32
    /// What it wrote to standard output.
    public let standardOutput: String
    /// What it wrote to standard error.
    public let standardError: String

    public init(status: Int32, standardOutput: String, standardError: String) {
        self.status = status
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    /// Standard error's lines.
    public var errorLines: [String] { standardError.split(separator: "\n").map(String.init) }
}

/// Runs an executable to completion with files for its output (no pipe can fill up), stopping
/// it after `timeout` seconds so that a hung command fails its test instead of hanging the run.
///
/// - Parameter grouping: ``ChildProcess/Grouping/ownGroup`` for a program that starts others (a
///   browser through Selenium), so that none is left behind when it ends or is stopped.
/// - Throws: ``TestFailure`` when `path` is not built, or when the command ran out of time.
public func runProcess(
    _ path: String, _ arguments: [String], environment: [String: String], standardInput: String = "",
    grouping: ChildProcess.Grouping = .inherited, timeout: TimeInterval = 60
) throws -> CommandResult {
    try Binaries.require(path)
    let run = try ChildProcess.run(
        path, arguments, environment: environment, standardInput: standardInput, grouping: grouping,
        timeout: timeout)
    return CommandResult(
        status: run.termination.status, standardOutput: run.standardOutput, standardError: run.standardError)
}

/// An executable started in the background, for tests that signal it while it waits.
public final class RunningProcess: Sendable {
    private let child: ChildProcess
    private let scratch: TemporaryDirectory

    /// Starts `path`, failing with ``TestFailure`` when it is not built.
    public init(_ path: String, _ arguments: [String], environment: [String: String]) throws {
        try Binaries.require(path)
        scratch = TemporaryDirectory("keyauth-bg")
        child = try ChildProcess(
            path, arguments, environment: environment, standardOutput: .file(scratch.path + "/stdout"),
            standardError: .file(scratch.path + "/stderr"))
    }

    /// What it wrote to standard error so far.
    public var standardError: String {
        (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
    }

    /// Waits up to `timeout` seconds for `text` on standard error; false as soon as the process
    /// has ended without writing it.
    public func waitForError(containing text: String, timeout: TimeInterval = 30) -> Bool {
        let deadline = ContinuousClock.now.advanced(by: .seconds(timeout))
        while ContinuousClock.now < deadline, !Task.isCancelled {
            if standardError.contains(text) { return true }
            guard child.isRunning else { return standardError.contains(text) }
            usleep(50_000)
        }
        return false
    }

    /// The names of the process's threads (`/proc/PID/task/*/comm`), sorted; empty once it has
    /// ended.
    public var threadNames: [String] {
        let base = "/proc/\(child.processID)/task"
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []
        return threads.compactMap { thread in
            (try? String(contentsOfFile: "\(base)/\(thread)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .newlines)
        }.sorted()
    }

    /// Sends `number` to the process.
    public func signal(_ number: Int32) {
        child.signal(number)
    }

    /// Waits for the exit and returns the status as a shell shows it; a process still running
    /// after `timeout` seconds is stopped (SIGTERM, then SIGKILL) and its status returned, and
    /// what the kernel said of its signals and threads just before is kept in
    /// ``stuckDiagnostics``.
    public func wait(timeout: TimeInterval = 30) -> Int32 {
        if let termination = child.wait(timeout: timeout) { return termination.status }
        stuck.withLock { $0 = child.descriptorDiagnostics + "\n" + Self.describe(child.processID) }
        return child.stop(grace: 5).status
    }

    /// For a process that ``wait(timeout:)`` had to stop: each thread's name, state, kernel wait
    /// channel and blocked, pending and caught signals (`/proc/PID/task/*/status`), so that a
    /// failure says whether a signal was blocked everywhere, never delivered, or handled by a
    /// thread that then hung. Nil when the process ended in time.
    public var stuckDiagnostics: String? { stuck.withLock { $0 } }
    private let stuck = Mutex<String?>(nil)

    private static func describe(_ processID: pid_t) -> String {
        let base = "/proc/\(processID)/task"
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []
        let fields = ["Name", "State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"]
        return threads.sorted().map { thread in
            let status = (try? String(contentsOfFile: "\(base)/\(thread)/status", encoding: .utf8)) ?? ""
            let wanted = status.split(separator: "\n").filter { line in
                fields.contains { line.hasPrefix($0 + ":") }
            }
            let channel = (try? String(contentsOfFile: "\(base)/\(thread)/wchan", encoding: .utf8)) ?? "?"
            return "thread \(thread): " + wanted.joined(separator: " ") + " wchan: \(channel)"
        }.joined(separator: "\n") + "\ndescriptors: " + openDescriptors(processID)
    }

    /// The process's open descriptors and what each is (`/proc/PID/fd`).
    private static func openDescriptors(_ processID: pid_t) -> String {
        let base = "/proc/\(processID)/fd"
        let numbers = ((try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []).compactMap { Int($0) }
        return numbers.sorted().map { number in
            "\(number)=" + ((try? FileManager.default.destinationOfSymbolicLink(atPath: "\(base)/\(number)")) ?? "?")
        }.joined(separator: " ")
    }

    deinit {
        child.kill()
        scratch.remove()
    }
}

/// A socket listening on 127.0.0.1 at a port the kernel picks, for a test's own server (one
/// that answers nothing, or badly): its descriptor, which the caller closes, and the port; nil
/// when it cannot listen.
public func loopbackListener() -> (descriptor: Int32, port: UInt16)? {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let listening = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(descriptor, $0, length) == 0 && listen(descriptor, 4) == 0 && getsockname(descriptor, $0, &length) == 0
        }
    }
    guard listening else {
        close(descriptor)
        return nil
    }
    return (descriptor, UInt16(bigEndian: address.sin_port))
}

/// A loopback port held bound but not listening: connecting to it is refused, and no other test
/// can start listening on it meanwhile (a port that was merely free a moment ago could be taken).
public final class ClosedPort: @unchecked Sendable {
    /// The reserved port.
    public let port: UInt16
    private let descriptor: Int32

    /// Reserves `port` when given (after a server on it stopped), else any free port.
    public init(port wanted: UInt16 = 0) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = wanted.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }
}
