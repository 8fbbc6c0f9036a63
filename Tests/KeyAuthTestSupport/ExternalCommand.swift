import Foundation

/// One run of an external program (`openssl`, `python3`): its status and output.
public struct ExternalCommand: Sendable {
    /// The status as a shell shows it: the exit status, or 128 + the signal that ended it.
    public let status: Int32
    public let output: String
    public let errorOutput: String

    /// Runs `arguments[0]` found on `PATH` with the rest as arguments, to completion.
    ///
    /// Output goes to files, so a chatty program cannot fill a pipe and stall.
    ///
    /// - Parameters:
    ///   - environment: the program's environment; the test process's when nil.
    ///   - timeout: seconds the program may run before it is stopped and the run fails.
    /// - Throws: ``TestFailure`` when it cannot start or runs out of time.
    public static func run(
        _ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval = 120
    ) throws -> ExternalCommand {
        let run = try ChildProcess.run(
            "/usr/bin/env", arguments, environment: environment ?? ProcessInfo.processInfo.environment,
            timeout: timeout)
        return ExternalCommand(
            status: run.termination.status, output: run.standardOutput, errorOutput: run.standardError)
    }
}
