import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Finds the built `keyauth` and `keyauth-server` executables and runs them as separate
/// processes, as a person or a script would.
enum Binaries {
    /// The build products directory: `KEYAUTH_BIN_DIR`, else the directory of the running test
    /// bundle (SwiftPM puts executables beside it).
    static let directory: String = {
        if let override = ProcessInfo.processInfo.environment["KEYAUTH_BIN_DIR"] { return override }
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments.first ?? ""
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        // The test binary may sit inside a bundle directory (`*.xctest/...`).
        while url.path != "/" {
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("keyauth").path) {
                return url.path
            }
            url.deleteLastPathComponent()
        }
        return packageRoot + "/.build/debug"
    }()

    static let packageRoot: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    static var keyauth: String { directory + "/keyauth" }
    static var server: String { directory + "/keyauth-server" }

    /// Whether the server exists as more than the scaffold's placeholder (`print("server")`), so
    /// that end-to-end tests are skipped only while it has not been written yet.
    static let serverIsAvailable: Bool = {
        guard FileManager.default.isExecutableFile(atPath: server) else { return false }
        let main = packageRoot + "/Server/Sources/keyauth-server/main.swift"
        guard let source = try? String(contentsOfFile: main, encoding: .utf8) else { return true }
        return source.trimmingCharacters(in: .whitespacesAndNewlines) != "print(\"server\")"
    }()

    /// A loopback port that was free a moment ago.
    static func freePort() -> UInt16 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
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
        return UInt16(bigEndian: address.sin_port)
    }
}

/// A loopback port held bound but not listening: connecting to it is refused, and no other test
/// can start listening on it meanwhile (a port that was merely free a moment ago could be taken).
final class ClosedPort: @unchecked Sendable {
    let port: UInt16
    private let descriptor: Int32

    /// Reserves `port` when given (after a server on it stopped), else any free port.
    init(port wanted: UInt16 = 0) {
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

/// One run of an executable: its status and both output streams.
struct ProcessResult: Sendable {
    let status: Int32
    let standardOutput: String
    let standardError: String

    var errorLines: [String] { standardError.split(separator: "\n").map(String.init) }
}

/// Runs an executable to completion with files for its output (no pipe can fill up), killing it
/// after `timeout` seconds so that a hung command fails its test instead of hanging the run.
func runProcess(
    _ path: String, _ arguments: [String], environment: [String: String], standardInput: String = "",
    timeout: TimeInterval = 60
) throws -> ProcessResult {
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
    return ProcessResult(
        status: process.terminationStatus,
        standardOutput: (try? String(contentsOf: output, encoding: .utf8)) ?? "",
        standardError: (try? String(contentsOf: error, encoding: .utf8)) ?? "")
}

/// An executable started in the background, for tests that signal it while it waits.
final class RunningProcess: @unchecked Sendable {
    private let process = Process()
    private let scratch: URL

    init(_ path: String, _ arguments: [String], environment: [String: String]) throws {
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

    var standardError: String {
        (try? String(contentsOf: scratch.appendingPathComponent("stderr"), encoding: .utf8)) ?? ""
    }

    /// Waits up to `timeout` seconds for `text` on standard error.
    func waitForError(containing text: String, timeout: TimeInterval = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if standardError.contains(text) { return true }
            usleep(50_000)
        }
        return false
    }

    func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    /// Waits for the exit (killing the process after `timeout` seconds) and returns the status.
    func wait(timeout: TimeInterval = 30) -> Int32 {
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

/// A `keyauth-server serve` process on a free loopback port with its own SQLite file.
///
/// The port is picked free and then handed to the server, so another test may take it in
/// between; a server that fails to start is retried on a fresh port a few times.
final class ServerProcess: @unchecked Sendable {
    private(set) var url = ""
    private(set) var port: UInt16 = 0
    private var process = Process()
    private let directory: String

    init(directory: String) throws {
        self.directory = directory
        var failure: ServerFailure?
        for _ in 0..<4 {
            do {
                try start()
                return
            } catch let error as ServerFailure {
                failure = error
            }
        }
        throw failure ?? ServerFailure(message: "keyauth-server did not start")
    }

    private func start() throws {
        port = Binaries.freePort()
        url = "http://127.0.0.1:\(port)"
        process = Process()
        process.executableURL = URL(fileURLWithPath: Binaries.server)
        // Open enrollment (not the default): the tests register first devices without codes.
        process.arguments = [
            "serve", "--listen", "127.0.0.1:\(port)", "--db", directory + "/server.db", "--enrollment", "open",
        ]
        let log = directory + "/server.log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        try process.run()
        try waitUntilHealthy()
    }

    /// What the server wrote, for failure messages.
    var log: String { (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "" }

    private func waitUntilHealthy() throws {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            guard process.isRunning else { throw ServerFailure(message: "keyauth-server exited: \(log)") }
            if healthStatus() == 200 { return }
            usleep(100_000)
        }
        stop()
        throw ServerFailure(message: "keyauth-server did not become healthy: \(log)")
    }

    private func healthStatus() -> Int? {
        guard let url = URL(string: url + "/healthz") else { return nil }
        let result = ResultBox()
        let semaphore = DispatchSemaphore(value: 0)
        var request = URLRequest(url: url)
        request.timeoutInterval = 1
        URLSession.shared.dataTask(with: request) { _, response, _ in
            result.status = (response as? HTTPURLResponse)?.statusCode
            semaphore.signal()
        }.resume()
        _ = semaphore.wait(timeout: .now() + 2)
        return result.status
    }

    /// Stops the server (SIGTERM) and waits for it.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    deinit {
        stop()
    }
}

struct ServerFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

private final class ResultBox: @unchecked Sendable {
    var status: Int?
}
