import Foundation
import Glibc
import KeyAuthServer

/// A `keyauth-server serve` process of the built binary on a free loopback port, its standard
/// error in a file (a pipe nobody drains could fill and stall the server).
///
/// Starting and waiting are separate steps, so that a test can launch several servers at the
/// same instant and only then wait for each.
final class KeyAuthServerProcess {
    /// `keyauth-server` from the build products directory that holds the test bundle.
    static let binary: URL? = {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("keyauth-server")
        return FileManager.default.isExecutableFile(atPath: binary.path) ? binary : nil
    }()

    /// The test's environment without `KEYAUTH_SERVER_*`, which would change the configuration.
    static var environment: [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("KEYAUTH_SERVER_") }
    }

    /// A name for failure messages.
    let name: String
    /// Where standard error goes.
    let logPath: String
    private let process = Process()
    private var boundPort: UInt16?

    /// Launches `keyauth-server serve` on 127.0.0.1, port 0, and returns without waiting.
    ///
    /// - Parameters:
    ///   - name: a name for messages (`A`, `B`).
    ///   - database: the `--db` value.
    ///   - issuer: the `--issuer` value, shared by every instance of a deployment.
    ///   - logPath: the file that receives standard error.
    ///   - enrollment: the `--enrollment` value; `open` by default so that first devices need no
    ///     code, nil to run with the server's default.
    convenience init(
        name: String, database: String, issuer: String, logPath: String, enrollment: String? = "open"
    ) throws {
        try self.init(
            name: name,
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", database, "--issuer", issuer, "--quiet",
                "--rate-limit", "100000", "--registration-limit", "100000", "--signing-key-bits", "2048",
                "--threads", "4",
            ] + (enrollment.map { ["--enrollment", $0] } ?? []), logPath: logPath)
    }

    /// Launches the binary with exactly `arguments` and returns without waiting.
    ///
    /// - Parameter umask: the file mode creation mask the server starts with (set by a shell
    ///   that then `exec`s it), to show that the server's files do not depend on it.
    init(name: String, arguments: [String], logPath: String, umask: String? = nil) throws {
        guard let binary = Self.binary else { throw TestFailure("keyauth-server is not built") }
        self.name = name
        self.logPath = logPath
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        defer { try? logHandle.close() }
        if let umask {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "umask \(umask) && exec \"$0\" \"$@\"", binary.path] + arguments
        } else {
            process.executableURL = binary
            process.arguments = arguments
        }
        process.environment = Self.environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = logHandle
        try process.run()
    }

    deinit {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// What the server wrote to standard error so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The port from the `listening on` banner, waiting for it up to `timeout` seconds.
    ///
    /// - Throws: ``TestFailure`` with the server's log when it exits or stays silent.
    @discardableResult
    func waitUntilListening(timeout: UInt64 = 30) throws -> UInt16 {
        if let boundPort { return boundPort }
        let marker = "listening on http://127.0.0.1:"
        let deadline = ServerClock.monotonicNanoseconds() + timeout * 1_000_000_000
        while true {
            let text = log
            if let range = text.range(of: marker), let port = UInt16(text[range.upperBound...].prefix { $0.isNumber }) {
                boundPort = port
                return port
            }
            guard process.isRunning else {
                throw TestFailure("server \(name) exited with status \(process.terminationStatus): \(text)")
            }
            guard ServerClock.monotonicNanoseconds() < deadline else {
                throw TestFailure("server \(name) did not start within \(timeout) s: \(text)")
            }
            usleep(10_000)
        }
    }

    /// SIGKILL: no handler runs, nothing is flushed. Returns whether the signal ended it.
    @discardableResult
    func kill() -> Bool {
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL
    }

    /// Waits for a process that should stop by itself (a refused start) and returns its exit
    /// status; one still running after `timeout` seconds is killed, and nil is returned.
    func waitUntilExit(timeout: UInt64 = 30) -> Int32? {
        let deadline = ServerClock.monotonicNanoseconds() + timeout * 1_000_000_000
        while process.isRunning, ServerClock.monotonicNanoseconds() < deadline { usleep(10_000) }
        guard !process.isRunning else {
            kill()
            return nil
        }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// SIGTERM, the graceful stop; returns the exit status.
    @discardableResult
    func terminate() -> Int32 {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Runs an admin command of the built binary (`enroll`, `devices`, `revoke`) to completion.
    ///
    /// The output of these commands is small, so both pipes are read to their end before
    /// waiting: neither can fill up and block the command.
    static func runCommand(
        _ arguments: [String], environment extra: [String: String] = [:], currentDirectory: String? = nil
    ) throws -> (status: Int32, output: String, error: String) {
        guard let binary else { throw TestFailure("keyauth-server is not built") }
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.environment = environment.merging(extra) { $1 }
        if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
        process.standardInput = FileHandle.nullDevice
        let output = Pipe()
        let error = Pipe()
        process.standardOutput = output
        process.standardError = error
        try process.run()
        let standard = output.fileHandleForReading.readDataToEndOfFile()
        let diagnostics = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (
            process.terminationStatus, String(decoding: standard, as: UTF8.self),
            String(decoding: diagnostics, as: UTF8.self)
        )
    }
}
