import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A `keyauth-server serve` process of the built binary on a loopback port the kernel picks, its
/// standard error in a file (a pipe nobody drains could fill and stall the server): the one way
/// tests start the server as a process, for the server's own tests and the command's.
///
/// Starting and waiting are separate steps, so that a test can launch several servers at the
/// same instant and only then wait for each. A binary that is not built fails the test.
public final class KeyAuthServerProcess: Sendable {
    /// `keyauth-server` in the build products directory.
    public static var binary: URL { URL(fileURLWithPath: Binaries.server) }

    /// The test's environment without `KEYAUTH_SERVER_*`, which would change the configuration,
    /// and with no settings file: a machine with the package installed has
    /// `/etc/keyauth/server.conf`, which every command would otherwise read.
    public static var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("KEYAUTH_SERVER_") }
        environment["KEYAUTH_SERVER_CONFIG"] = "/dev/null"
        return environment
    }

    /// A name for failure messages.
    public let name: String
    /// Where standard error goes.
    public let logPath: String
    private let process: ChildProcess
    private let boundPort = Mutex<UInt16?>(nil)

    /// Launches `keyauth-server serve` on 127.0.0.1, port 0, for a deployment of several
    /// instances, and returns without waiting.
    ///
    /// - Parameters:
    ///   - name: a name for messages (`A`, `B`).
    ///   - database: the `--db` value.
    ///   - issuer: the `--issuer` value, shared by every instance of a deployment.
    ///   - logPath: the file that receives standard error.
    ///   - enrollment: the `--enrollment` value; `open` by default so that first devices need no
    ///     code, nil to run with the server's default.
    ///   - extraArguments: more `serve` options (`--cleanup-interval 1`, `--dpop required`).
    ///   - extraEnvironment: variables added to the server's environment (`LD_PRELOAD` for a
    ///     test that injects faults).
    public convenience init(
        name: String, database: String, issuer: String, logPath: String, enrollment: String? = "open",
        extraArguments: [String] = [], extraEnvironment: [String: String] = [:]
    ) throws {
        try self.init(
            name: name,
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", database, "--issuer", issuer, "--quiet",
                "--rate-limit", "100000", "--registration-limit", "100000", "--signing-key-bits", "2048",
                "--threads", "4",
            ] + (enrollment.map { ["--enrollment", $0] } ?? []) + extraArguments, logPath: logPath,
            extraEnvironment: extraEnvironment)
    }

    /// A server for client tests, started and listening: its own SQLite file in `directory`,
    /// open enrollment (first devices need no code), the default issuer (its URL) and limits.
    ///
    /// - Parameter extraArguments: more `serve` options (`--dpop required`).
    public static func started(in directory: String, extraArguments: [String] = []) throws -> KeyAuthServerProcess {
        let server = try KeyAuthServerProcess(
            name: "server",
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", directory + "/server.db", "--enrollment", "open",
            ] + extraArguments, logPath: directory + "/server.log")
        try server.waitUntilListening()
        return server
    }

    /// A server on `database` as an administrator runs one beside `keyauth-server` admin
    /// commands on the same file, started and listening: open enrollment, no metrics listener,
    /// no request log, no settings file. Its standard error goes to `directory/name.log`; it is
    /// stopped again when it does not come up.
    ///
    /// - Parameter extraArguments: more `serve` options (`--replay-cache database`).
    public static func started(
        name: String, database: String, in directory: String, extraArguments: [String] = []
    ) throws -> KeyAuthServerProcess {
        let server = try KeyAuthServerProcess(
            name: name,
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", database, "--enrollment", "open", "--metrics-listen", "off",
                "--quiet", "--config", "/dev/null",
            ] + extraArguments, logPath: "\(directory)/\(name).log")
        do {
            try server.waitUntilListening()
        } catch {
            server.terminate()
            throw error
        }
        return server
    }

    /// Launches the binary with exactly `arguments` and returns without waiting.
    ///
    /// - Parameters:
    ///   - umask: the file mode creation mask the server starts with (set by a shell that then
    ///     `exec`s it), to show that the server's files do not depend on it.
    ///   - ulimit: arguments of the shell's `ulimit` run before the server starts (`-Sn 128`: an
    ///     open-file limit lower than the test's own), set the same way.
    ///   - extraEnvironment: variables added to ``environment``.
    ///   - ignoringHangUp: whether the server starts with SIGHUP ignored, as `nohup` starts it.
    /// - Throws: ``TestFailure`` when the binary is not built.
    public init(
        name: String, arguments: [String], logPath: String, umask: String? = nil, ulimit: String? = nil,
        extraEnvironment: [String: String] = [:], ignoringHangUp: Bool = false
    ) throws {
        let binary = try Binaries.require(Self.binary.path)
        self.name = name
        self.logPath = logPath
        // A server still running when this value goes is killed with it (ChildProcess's deinit).
        let environment = Self.environment.merging(extraEnvironment) { $1 }
        let setup = [umask.map { "umask \($0)" }, ulimit.map { "ulimit \($0)" }, ignoringHangUp ? "trap '' HUP" : nil]
            .compactMap { $0 }
        if !setup.isEmpty {
            process = try ChildProcess(
                "/bin/sh", ["-c", (setup + ["exec \"$0\" \"$@\""]).joined(separator: " && "), binary] + arguments,
                environment: environment, standardError: .file(logPath))
        } else if environment["LD_PRELOAD"]?.contains("libfaketime") == true {
            // libfaketime preloaded into a process that posix_spawn starts leaves the Swift
            // runtime's `CommandLine.arguments` empty (the server then serves its defaults in the
            // working directory); started through a program that execs it, it gets them. The
            // `faketime` command itself forks and waits, so a SIGTERM would miss the server.
            process = try ChildProcess(
                "/usr/bin/env", [binary] + arguments, environment: environment, standardError: .file(logPath))
        } else {
            process = try ChildProcess(binary, arguments, environment: environment, standardError: .file(logPath))
        }
    }

    /// Whether the server has not exited yet.
    public var isRunning: Bool { process.isRunning }

    /// The server's process id, for reading its `/proc` entry.
    public var processID: pid_t { process.processID }

    /// What the server wrote to standard error so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The bound port, once ``waitUntilListening(timeout:)`` has seen it.
    public var port: UInt16 { boundPort.withLock { $0 } ?? 0 }

    /// `http://127.0.0.1:PORT`, the server's URL and default issuer.
    public var url: String { "http://127.0.0.1:\(port)" }

    /// The port from the `listening on` banner, waiting for it up to `timeout` seconds.
    ///
    /// - Throws: ``TestFailure`` with the server's log when it exits or stays silent.
    @discardableResult
    public func waitUntilListening(timeout: TimeInterval = 30) throws -> UInt16 {
        if let port = boundPort.withLock({ $0 }) { return port }
        let marker = "listening on http://127.0.0.1:"
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let text = log
            if let range = text.range(of: marker), let port = UInt16(text[range.upperBound...].prefix { $0.isNumber }) {
                boundPort.withLock { $0 = port }
                return port
            }
            if let termination = process.termination {
                throw TestFailure("server \(name) ended (\(termination)): \(text)")
            }
            guard Date() < deadline, !Task.isCancelled else {
                throw TestFailure("server \(name) did not start within \(Int(timeout)) s: \(text)")
            }
            usleep(10_000)
        }
    }

    /// Whether the log comes to contain `text` within `timeout` seconds: for the lines the server
    /// writes after its `listening on` banner (its start warnings), which a reader that checks
    /// once, right after the banner, can miss on a busy machine.
    public func logEventuallyContains(_ text: String, timeout: TimeInterval = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !log.contains(text) {
            guard Date() < deadline, !Task.isCancelled else { return false }
            usleep(10_000)
        }
        return true
    }

    /// SIGKILL: no handler runs, nothing is flushed. Returns whether the signal ended it.
    @discardableResult
    public func kill() -> Bool {
        process.kill() == .signaled(SIGKILL)
    }

    /// Waits for a process that should stop by itself (a refused start) and returns its exit
    /// status; one still running after `timeout` seconds is killed, and nil is returned.
    public func waitUntilExit(timeout: TimeInterval = 30) -> Int32? {
        guard let termination = process.wait(timeout: timeout) else {
            kill()
            return nil
        }
        return termination.status
    }

    /// `signal` (SIGTERM by default; SIGINT and SIGHUP stop the server the same way), the
    /// graceful stop; returns the status as a shell shows it. A server still running 30 s later
    /// is killed (and its status is then 137).
    @discardableResult
    public func terminate(with signal: Int32 = SIGTERM) -> Int32 {
        process.stop(signal, grace: 30).status
    }

    /// Runs an admin command of the built binary (`enroll`, `devices`, `revoke`) to completion,
    /// stopping it after `timeout` seconds.
    ///
    /// - Throws: ``TestFailure`` when the binary is not built or the command ran out of time.
    public static func runCommand(
        _ arguments: [String], environment extra: [String: String] = [:], currentDirectory: String? = nil,
        timeout: TimeInterval = 60
    ) throws -> (status: Int32, output: String, error: String) {
        let run = try ChildProcess.run(
            try Binaries.require(binary.path), arguments, environment: environment.merging(extra) { $1 },
            currentDirectory: currentDirectory, timeout: timeout)
        return (run.termination.status, run.standardOutput, run.standardError)
    }
}
