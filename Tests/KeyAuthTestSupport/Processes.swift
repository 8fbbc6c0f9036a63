import Foundation

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

/// Runs an executable to completion with files for its output (no pipe can fill up), killing it
/// after `timeout` seconds so that a hung command fails its test instead of hanging the run.
///
/// - Throws: ``TestFailure`` when `path` is not built.
public func runProcess(
    _ path: String, _ arguments: [String], environment: [String: String], standardInput: String = "",
    timeout: TimeInterval = 60
) throws -> CommandResult {
    try Binaries.require(path)
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keyauth-run-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let input = scratch.appendingPathComponent("stdin")
    let output = scratch.appendingPathComponent("stdout")
    let error = scratch.appendingPathComponent("stderr")
    try Data(standardInput.utf8).write(to: input)
    _ = FileManager.default.createFile(atPath: output.path, contents: nil)
    _ = FileManager.default.createFile(atPath: error.path, contents: nil)

    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.environment = environment
    process.standardInput = try FileHandle(forReadingFrom: input)
    process.standardOutput = try FileHandle(forWritingTo: output)
    process.standardError = try FileHandle(forWritingTo: error)
    try process.run()
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(20_000) }
    if process.isRunning {
        process.terminate()
        process.waitUntilExit()
    }
    process.waitUntilExit()
    return CommandResult(
        status: process.terminationStatus,
        standardOutput: (try? String(contentsOf: output, encoding: .utf8)) ?? "",
        standardError: (try? String(contentsOf: error, encoding: .utf8)) ?? "")
}

/// An executable started in the background, for tests that signal it while it waits.
public final class RunningProcess: @unchecked Sendable {
    private let process = Process()
    private let scratch: URL

    /// Starts `path`, failing with ``TestFailure`` when it is not built.
    public init(_ path: String, _ arguments: [String], environment: [String: String]) throws {
        try Binaries.require(path)
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keyauth-bg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        for name in ["stdout", "stderr"] {
            _ = FileManager.default.createFile(atPath: scratch.appendingPathComponent(name).path, contents: nil)
        }
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: scratch.appendingPathComponent("stdout"))
        process.standardError = try FileHandle(forWritingTo: scratch.appendingPathComponent("stderr"))
        try process.run()
    }

    /// What it wrote to standard error so far.
    public var standardError: String {
        (try? String(contentsOf: scratch.appendingPathComponent("stderr"), encoding: .utf8)) ?? ""
    }

    /// Waits up to `timeout` seconds for `text` on standard error.
    public func waitForError(containing text: String, timeout: TimeInterval = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if standardError.contains(text) { return true }
            usleep(50_000)
        }
        return false
    }

    /// Sends `number` to the process.
    public func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    /// Waits for the exit (killing the process after `timeout` seconds) and returns the status.
    public func wait(timeout: TimeInterval = 30) -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(at: scratch)
    }
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
