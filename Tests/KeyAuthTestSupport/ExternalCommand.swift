import Foundation

/// One run of an external program (`openssl`, `python3`): its status and output.
public struct ExternalCommand: Sendable {
    public let status: Int32
    public let output: String
    public let errorOutput: String

    /// Runs `arguments[0]` found on `PATH` with the rest as arguments, to completion.
    ///
    /// Output goes to files, so a chatty program cannot fill a pipe and stall.
    public static func run(_ arguments: [String], environment: [String: String]? = nil) throws -> ExternalCommand {
        let scratch = TemporaryDirectory("keyauth-command")
        defer { scratch.remove() }
        let output = URL(fileURLWithPath: scratch.path + "/stdout")
        let error = URL(fileURLWithPath: scratch.path + "/stderr")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        _ = FileManager.default.createFile(atPath: error.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: error)
        try process.run()
        process.waitUntilExit()
        return ExternalCommand(
            status: process.terminationStatus,
            output: String(decoding: try Data(contentsOf: output), as: UTF8.self),
            errorOutput: String(decoding: try Data(contentsOf: error), as: UTF8.self))
    }
}
