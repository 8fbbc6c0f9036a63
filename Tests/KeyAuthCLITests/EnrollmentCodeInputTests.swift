import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

@Suite("keyauth register --enrollment-code -", .timeLimit(.minutes(10)))
struct EnrollmentCodeInputTests {
    /// Runs `body` with the global `withFirstDevice`'s server and second home, and a valid code
    /// for alice: a second device needs one to be active at once.
    private func withFirstDeviceAndCode(
        _ body: (InProcessKeyAuthServer, CommandHarness, String) async throws -> Void
    ) async throws {
        try await withFirstDevice { _, second, server in
            try await body(server, second, try server.enrollmentCode(for: "alice"))
        }
    }

    @Test("the code is the first line of standard input and is sent, never shown")
    func codeFromStandardInput() async throws {
        try await withFirstDeviceAndCode { server, second, code in
            let result = await second.registerUnattended(
                server.url, extra: ["--enrollment-code", "-"], standardInput: "  \(code) \n")
            #expect(result.status == 0, "\(result.standardError)")
            #expect(server.keyIDs(withStatus: "active").count == 2)
            let registration = try #require(server.requests.last { $0.method == "POST" && $0.path == "/v1/devices" })
            #expect(try JSONValue(parsing: registration.body)["enrollment_code"] == .string(code))
            #expect(!result.standardOutput.contains(code))
            #expect(!result.standardError.contains(code))
        }
    }

    @Test("with --pin-stdin the code is the first line and the PIN the second")
    func codeThenPIN() async throws {
        try await withFirstDeviceAndCode { server, second, code in
            let result = await second.run(
                [
                    "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin",
                    "--enrollment-code", "-",
                ], standardInput: "\(code)\n135790\n")
            #expect(result.status == 0, "\(result.standardError)")
            #expect(server.keyIDs(withStatus: "active").count == 2)
            let name = try second.accounts.resolve(nil)
            #expect(try second.accounts.keyPairStore(for: name).isEncrypted())
            let login = await second.run(["login", "--pin-stdin"], standardInput: "135790\n")
            #expect(login.status == 0, "\(login.standardError)")
        }
    }

    @Test("no line, or a blank one, is a usage error that registers nothing", arguments: ["", "\n", "   \n"])
    func missingCode(input: String) async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        let result = await harness.registerUnattended(
            server.url, extra: ["--enrollment-code", "-"], standardInput: input)
        #expect(result.status == 64)
        #expect(result.errorLines.count == 1)
        #expect(result.standardError.contains("--enrollment-code -"))
        #expect(harness.accounts.accountNames().isEmpty)
        #expect(server.requests.isEmpty)
    }
}
