import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The client in everyday use: notices told once, quiet endings", .timeLimit(.minutes(5)))
struct EverydayClientTests {
    @Test("a machine without a TPM is told why at its first registration, then only that it has none")
    func missingTPMToldOnce() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let first = await harness.registerUnattended(server.url)
        #expect(first.status == 0, "\(first.standardError)")
        #expect(
            first.standardOutput.hasPrefix("Key store: file (the TPM at \(SoftwareTPM.absentTCTI) is unavailable"),
            "\(first.standardOutput)")
        let second = await harness.registerUnattended(server.url, user: "bob")
        #expect(second.status == 0, "\(second.standardError)")
        #expect(second.standardOutput.hasPrefix("Key store: file (no TPM)\n"), "\(second.standardOutput)")
        // Another TPM (another TCTI) is news again.
        let elsewhere = CommandHarness(tcti: "swtpm:host=127.0.0.1,port=9")
        defer { elsewhere.home.remove() }
        try FileManager.default.copyItem(
            atPath: harness.home.path + "/no-tpm", toPath: elsewhere.home.path + "/no-tpm")
        let third = await elsewhere.registerUnattended(server.url, user: "carol")
        #expect(third.status == 0, "\(third.standardError)")
        #expect(third.standardOutput.hasPrefix("Key store: file (the TPM at swtpm:"), "\(third.standardOutput)")
    }

    @Test("Control-C ends keyauth requests --watch with exit 130 and no error line")
    func watchEndsQuietly() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            try #require(try machine.register(server, user: "alice").status == 0)
            let watch = try TerminalProcess(
                Binaries.keyauth, ["requests", "--watch"], environment: machine.environment)
            let deadline = Date().addingTimeInterval(20)
            while !watch.standardError.contains("Control-C stops.") && Date() < deadline {
                usleep(50_000)
            }
            #expect(watch.standardError.contains("Watching for sign-in requests for alice"))
            // Into a long poll, where the stop used to come out as an error line.
            usleep(300_000)
            watch.type("\u{03}")
            #expect(watch.wait() == 130)
            #expect(!watch.standardError.contains("keyauth:"), "\(watch.standardError)")
            #expect(watch.standardError.split(separator: "\n").count == 1, "\(watch.standardError)")
        }
    }

    @Test("a device's token after a PIN says amr pin; without a presence check, the key alone")
    func tokenStatesPresence() async throws {
        let withPIN = CommandHarness()
        let withoutCheck = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            withPIN.home.remove()
            withoutCheck.home.remove()
        }
        func amr(_ harness: CommandHarness) async throws -> [String] {
            let token = await harness.run(["token"])
            try #require(token.status == 0, "\(token.standardError)")
            let payload = try #require(
                token.standardOutput.split(separator: ".").dropFirst().first.flatMap { Base64URL.decode($0) })
            let claims = try JSONValue(parsing: String(decoding: payload, as: UTF8.self))
            return claims["amr"]?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        let registered = await withPIN.run(
            ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
            standardInput: "123456\n")
        try #require(registered.status == 0, "\(registered.standardError)")
        #expect(try await amr(withPIN) == ["swk", "pin"])
        let login = await withPIN.run(["login", "--pin-stdin"], standardInput: "123456\n")
        try #require(login.status == 0, "\(login.standardError)")
        #expect(try await amr(withPIN) == ["swk", "pin"])
        try #require(await withoutCheck.registerUnattended(server.url, user: "bob").status == 0)
        #expect(try await amr(withoutCheck) == ["swk"])
    }
}
