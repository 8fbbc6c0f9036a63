import Foundation
import KeyAuthTestSupport
import Testing

/// The README's five-minute walkthrough, run as it is written: the lines of its `sh` block, with
/// the built binaries instead of the `install` line, a scratch directory for `/srv/keyauth-demo`,
/// a free port for 8080, and the PINs typed (`--pin-stdin`) where a comment says a line asks for
/// one; no line is added (a wait for the server included). A command the README shows that stops
/// working, or a line that races the one before it, fails here.
@Suite("The README's walkthrough", .serialized, .timeLimit(.minutes(5)))
struct WalkthroughTests {
    /// The lines of the block after `<!-- walkthrough -->`.
    private static func walkthroughLines() throws -> [String] {
        let readme = try String(contentsOf: Vectors.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.components(separatedBy: "\n")
        let marker = try #require(lines.firstIndex(of: "<!-- walkthrough -->"), "README has no walkthrough")
        try #require(lines[marker + 1] == "```sh", "the walkthrough is not an sh block")
        let end = try #require(lines[(marker + 2)...].firstIndex(of: "```"))
        return Array(lines[(marker + 2)..<end])
    }

    /// The walkthrough as a script for a scratch directory and port.
    private static func script(_ lines: [String], directory: String, port: UInt16) throws -> String {
        var script = [
            "set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
            "exec > >(tee -a \(directory)/walkthrough.log) 2>&1",
        ]
        var installs = 0
        for line in lines {
            if line.hasPrefix("install ") {
                installs += 1
                continue  // the test's PATH has the built binaries
            }
            var command = line.replacingOccurrences(of: "/srv/keyauth-demo", with: directory)
                .replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(port)")
            if let comment = command.range(of: "  # ") {
                let asksForPIN = command[comment.upperBound...].contains("PIN")
                command = String(command[..<comment.lowerBound])
                if asksForPIN { command = "printf '%s\\n' \"$PIN\" | " + command + " --pin-stdin" }
            }
            command = command.replacingOccurrences(
                of: "SHORT_CODE",
                with:
                    "\"$(grep -o 'short code [A-Za-z0-9_-]*' \(directory)/walkthrough.log | tail -n 1 | cut -d' ' -f3)\""
            )
            if command.contains("--no-wait") { command += " || [ $? -eq 75 ]" }  // pending: EX_TEMPFAIL
            // Nothing is inserted between the lines: the README's own wait for the server is
            // what lets `enroll` find its database.
            script.append(command)
        }
        #expect(installs == 1, "the walkthrough no longer installs the binaries first")
        // The page the walkthrough sends a browser to, while the server still runs.
        script.append("curl -fsS -o /dev/null http://127.0.0.1:\(port)/account && echo 'account page: 200'")
        return script.joined(separator: "\n") + "\n"
    }

    @Test(
        "every command of the walkthrough works: a server from a settings file, a PIN device, a second device approved by it"
    )
    func walkthroughRuns() throws {
        try Binaries.require(Binaries.keyauth)
        try Binaries.require(Binaries.server)
        let scratch = TemporaryDirectory("keyauth-walkthrough")
        defer { scratch.remove() }
        let port = ApacheServer.freePort()
        let path = scratch.path + "/walkthrough.sh"
        try Data(try Self.script(try Self.walkthroughLines(), directory: scratch.path, port: port).utf8)
            .write(to: URL(fileURLWithPath: path))
        let environment = [
            "PATH": Binaries.directory + ":/usr/local/bin:/usr/bin:/bin", "HOME": scratch.path,
            "KEYAUTH_HOME": scratch.path + "/laptop", "PIN": "correct horse battery", "LANG": "C.UTF-8",
            // Off: the metrics port beside a free port need not be free.
            "KEYAUTH_SERVER_METRICS_LISTEN": "off", "KEYAUTH_TPM_TCTI": "none",
        ]
        let run = try ChildProcess.run("/bin/bash", [path], environment: environment, timeout: 240)
        let output = run.standardOutput + run.standardError
        #expect(run.termination == .exited(0), "\(output)")
        #expect(output.contains("Registered this device as"), "\(output)")
        #expect(output.contains("it waits for approval"), "\(output)")
        #expect(output.contains("Approved device"), "\(output)")
        #expect(output.contains("Logged in to http://127.0.0.1:\(port) as alice"), "\(output)")
        #expect(output.contains("account page: 200"), "\(output)")
        let devices = output.components(separatedBy: "\n").filter { $0.contains("laptop") || $0.contains("desktop") }
        #expect(devices.filter { $0.contains("active") }.count >= 2, "\(output)")
    }
}
