import Foundation
import KeyAuth
import KeyAuthTestSupport

/// Runs a Python program with Debian's `/usr/bin/python3`, whose packages (python3-selenium,
/// python3-authlib) the tests use, and returns the one JSON line it printed.
///
/// It runs in a process group of its own, so that a chromedriver or Chromium it started is
/// killed when it ends or runs out of time.
///
/// - Parameters:
///   - source: the program, written to `directory` first.
///   - environment: variables besides `PATH`, `LANG` and `HOME` (which is `directory`).
/// - Throws: ``TestFailure`` with Python's standard error when it printed nothing.
func runPythonScript(
    _ source: String, arguments: [String], in directory: String, environment: [String: String] = [:],
    timeout: TimeInterval = 240
) throws -> JSONValue {
    let script = directory + "/script-\(UUID().uuidString).py"
    try source.write(toFile: script, atomically: true, encoding: .utf8)
    let run = try runProcess(
        "/usr/bin/python3", [script] + arguments,
        environment: ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": directory].merging(environment) { $1 },
        grouping: .ownGroup, timeout: timeout)
    let printed = run.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    guard !printed.isEmpty else { throw TestFailure("the Python script printed nothing: \(run.standardError)") }
    return try JSONValue(parsing: printed)
}
