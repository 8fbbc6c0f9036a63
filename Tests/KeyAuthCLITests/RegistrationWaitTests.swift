import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthCLI

@Suite("Waiting for approval at registration", .timeLimit(.minutes(5)))
struct RegistrationWaitTests {
    @Test("register without a terminal says until when it waits for approval and how to stop")
    func waitingLineWithoutTerminal() async throws {
        try await withFirstDevice { first, second, server in
            let started = Date()
            async let registration = second.registerUnattended(server.url)
            var pending: String?
            for _ in 0..<1200 where pending == nil {
                try await Task.sleep(for: .milliseconds(50))
                pending = server.keyIDs(withStatus: "pending").first
            }
            let keyID = try #require(pending)
            try server.setStatus("active", of: keyID)
            let result = await registration
            let finished = Date()
            #expect(result.status == 0, "\(result.standardError)")
            #expect(result.errorLines.count == 2, "\(result.standardError)")
            #expect(result.errorLines.first?.hasPrefix("Approval needed: ") == true)
            let waiting = try #require(result.errorLines.last)
            // The deadline is the server's 10 minutes from the registration, as a local time of day.
            let seconds = Int(finished.timeIntervalSince(started).rounded(.up))
            let candidates = (0...seconds).map { offset in
                ProgressReporter.waitingLine(until: started + 600 + TimeInterval(offset))
            }
            #expect(candidates.contains(waiting), "\(waiting)")
            #expect(waiting.hasSuffix("(Ctrl-C to stop; the registration stays pending)"))
            #expect(!result.standardError.contains("\u{1B}"))
        }
    }

    @Test("the waiting line names the time of day in the given zone")
    func waitingLineFormat() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        let deadline = Date(timeIntervalSince1970: 1_796_158_509)  // 2026-12-01T20:55:09Z
        let zone = try #require(utc.abbreviation(for: deadline))
        #expect(
            ProgressReporter.waitingLine(until: deadline, timeZone: utc)
                == "Waiting for approval on another device until 20:55:09 \(zone) "
                + "(Ctrl-C to stop; the registration stays pending)")
        #expect(
            ProgressReporter.waitingLine(until: nil, timeZone: utc)
                == "Waiting for approval on another device (Ctrl-C to stop; the registration stays pending)")
    }

    @Test("register --no-wait exits 75 with what to approve, and login works once approved")
    func noWaitThenLogin() async throws {
        try await withFirstDevice { first, second, server in
            let registered = await second.registerUnattended(server.url, extra: ["--no-wait"])
            #expect(registered.status == 75, "\(registered.standardError)")
            let keyID = try #require(server.keyIDs(withStatus: "pending").first)
            let short = String(keyID.prefix(8))
            #expect(registered.standardError.contains("run `keyauth devices approve \(short)`"))
            #expect(!registered.standardError.contains("Waiting for approval"))
            let name = try second.accounts.resolve(nil)
            #expect(registered.standardOutput.contains("then run `keyauth login --account \(name)`"))

            let early = await second.run(["login", "--no-wait"])
            #expect(early.status == 75)
            expectOneErrorLine(early)

            let approve = await first.run(["devices", "approve", short, "--pin-stdin"], standardInput: "123456\n")
            #expect(approve.status == 0, "\(approve.standardError)")
            let login = await second.run(["login", "--account", name])
            #expect(login.status == 0, "\(login.standardError)")
            #expect(try second.accounts.load(name).status == .active)
        }
    }

    @Test("the same user on the same server under another host name is refused, naming the account")
    func sameIssuerOtherHostName() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        try #require(await harness.registerUnattended(server.url).status == 0)
        let existing = try harness.accounts.resolve(nil)
        let otherName = server.url.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        let again = await harness.registerUnattended(otherName)
        #expect(again.status == 1)
        expectOneErrorLine(again)
        #expect(
            again.standardError.contains(
                "\(otherName) is the same server as account \(existing) (issuer \(server.url))"))
        #expect(again.standardError.contains("keyauth login --account \(existing)"))
        #expect(harness.accounts.accountNames() == [existing])
        #expect(server.keyIDs(withStatus: "active").count == 1)
        // Another user of that server is another account.
        #expect(await harness.registerUnattended(otherName, user: "bob").status == 0)
        #expect(harness.accounts.accountNames().count == 2)
    }

    @Test(
        "a first device refused for want of an enrollment code says to ask an administrator",
        arguments: [([String](), "for an enrollment code"), (["--enrollment-code", "WRONG-CODE"], "for a new code")])
    func enrollmentCodeHint(extra: [String], wanted: String) async throws {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        // The server's own refusals (KeyAuthService+Registration.swift), after a valid discovery.
        let issuer = Mutex("")
        let responder = try LoopbackHTTPResponder { request in
            if request.path == "/.well-known/openid-configuration" {
                return .json(200, #"{"issuer":"\#(issuer.withLock { $0 })"}"#)
            }
            return .oauthError(403, "access_denied", "an enrollment code is required to register a first device")
        }
        defer { responder.stop() }
        issuer.withLock { $0 = responder.url }
        let result = await harness.registerUnattended(responder.url, extra: extra)
        #expect(result.status == 77)
        expectOneErrorLine(result)
        #expect(result.standardError.contains("ask an administrator \(wanted) (`keyauth-server enroll alice`)"))
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test("login reads discovery before the PIN: an unreachable server exits 69 and asks nothing")
    func loginChecksServerBeforePIN() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer { harness.home.remove() }
        let registered = await harness.run(
            ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
            standardInput: "123456\n")
        try #require(registered.status == 0, "\(registered.standardError)")
        server.stop()
        let terminal = FixedSecretReader(answers: ["123456"])
        let login = await harness.run(["login"], terminal: terminal)
        #expect(login.status == 69, "\(login.standardError)")
        expectOneErrorLine(login)
        #expect(terminal.requests.isEmpty)
    }
}

@Suite("Reaching the server at registration, with the built binaries", .serialized, .timeLimit(.minutes(5)))
struct RegistrationReachTests {
    @Test("an https:// URL to a plain-HTTP server says so, before a key is made")
    func httpsToPlainHTTP() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let https = server.url.replacingOccurrences(of: "http://", with: "https://")
            let result = try machine.run(["register", "--server", https, "--user", "alice", "--presence", "none"])
            #expect(result.status == 69)
            expectOneErrorLine(result)
            #expect(
                result.errorLines.first
                    == "keyauth: TLS handshake with the server at \(https) failed; is this an http:// server?")
            #expect(machine.accounts.accountNames().isEmpty)
        }
    }
}
