import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `KeyAuthCommand` in-process with a private keyauth home, scripted standard input and a
/// scripted terminal, on a machine without a TPM (``SoftwareTPM/absentTCTI``) unless `tcti`
/// names one.
struct CommandHarness {
    let home: TemporaryDirectory
    let tcti: String

    init(tcti: String = SoftwareTPM.absentTCTI) {
        home = TemporaryDirectory("keyauth-cli")
        self.tcti = tcti
    }

    var environment: [String: String] {
        ["KEYAUTH_HOME": home.path, "HOME": home.path, "KEYAUTH_TIMEOUT": "5", TPMConnection.environmentVariable: tcti]
    }

    var accounts: AccountStore { AccountStore(home: home.path) }

    /// Runs `arguments`.
    ///
    /// - Parameters:
    ///   - standardInput: fed through a pipe, for `--pin-stdin`.
    ///   - terminal: answers terminal prompts; a reader with no answers by default.
    ///   - isTerminal: whether standard error pretends to be a terminal.
    func run(
        _ arguments: [String], standardInput: String = "",
        terminal: any SecretReader = FixedSecretReader(answers: [String]()),
        isTerminal: Bool = false, pollInterval: Duration = .milliseconds(50), pamDirectory: String? = nil
    ) async -> CommandResult {
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else {
            return CommandResult(status: -1, standardOutput: "", standardError: "pipe")
        }
        let bytes = Array(standardInput.utf8)
        if !bytes.isEmpty { _ = bytes.withUnsafeBytes { write(descriptors[1], $0.baseAddress, $0.count) } }
        close(descriptors[1])
        defer { close(descriptors[0]) }
        let output = OutputCollector()
        let error = OutputCollector()
        let io = CommandIO(
            writeOutput: { output.append($0) }, writeError: { error.append($0) }, standardInput: descriptors[0],
            environment: environment, isErrorTerminal: isTerminal, terminalReader: terminal, hostName: "test-host",
            pamConfigurationDirectory: pamDirectory, pollInterval: pollInterval)
        let status = await KeyAuthCommand.run(arguments, io: io)
        return CommandResult(status: status, standardOutput: output.text, standardError: error.text)
    }

    /// Runs `keyauth register` for `user` at `serverURL` with no presence check and a 2048-bit
    /// key (the fastest registration), adding `extra` arguments.
    func registerUnattended(
        _ serverURL: String, user: String = "alice", extra: [String] = [], standardInput: String = ""
    ) async -> CommandResult {
        await run(
            ["register", "--server", serverURL, "--user", user, "--bits", "2048", "--presence", "none"] + extra,
            standardInput: standardInput)
    }
}

/// Checks that a failed command printed exactly one line, starting `keyauth: `.
func expectOneErrorLine(_ result: CommandResult, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(result.errorLines.count == 1, "\(result.standardError)", sourceLocation: sourceLocation)
    #expect(result.errorLines.first?.hasPrefix("keyauth: ") == true, sourceLocation: sourceLocation)
}

/// Runs `body` with a server in-process where alice's first device is registered with a PIN
/// (so that it can approve others; PIN 123456), and a second, empty keyauth home.
func withFirstDevice(
    _ body: (_ first: CommandHarness, _ second: CommandHarness, _ server: InProcessKeyAuthServer) async throws -> Void
) async throws {
    let first = CommandHarness()
    let second = CommandHarness()
    let server = try InProcessKeyAuthServer()
    defer {
        server.stop()
        first.home.remove()
        second.home.remove()
    }
    let registered = await first.run(
        ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
        standardInput: "123456\n")
    try #require(registered.status == 0, "\(registered.standardError)")
    try await body(first, second, server)
}
