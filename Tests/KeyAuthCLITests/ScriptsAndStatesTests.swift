import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The built binary in scripts, and the states it reports", .serialized, .timeLimit(.minutes(10)))
struct ScriptsAndStatesTests {
    @Test("keyauth token in a new session without a terminal prints the stored token, with no PIN asked")
    func tokenWithoutTerminal() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "alice", pin: "246813").status == 0)
            let stored = try #require(
                try machine.accounts.credentials.loadToken(account: machine.accounts.resolve(nil)))
            // `setsid -w keyauth token </dev/null`, as cron or a systemd service runs it.
            let token = try runProcess(
                "/usr/bin/setsid", ["-w", Binaries.keyauth, "token"], environment: machine.environment)
            #expect(token.status == 0, "\(token.standardError)")
            #expect(token.standardOutput == stored.value + "\n")
            #expect(token.standardError.isEmpty)

            // After logout only a real login could give a token, and it needs the PIN.
            let logout = try machine.run(["logout"])
            #expect(logout.status == 0, "\(logout.standardError)")
            #expect(logout.standardOutput.contains("Deleted the stored access token"))
            let again = try runProcess(
                "/usr/bin/setsid", ["-w", Binaries.keyauth, "token"], environment: machine.environment)
            #expect(again.status == 77)
            #expect(again.standardError.contains("there is no terminal to ask for the PIN"))
        }
    }

    @Test("keyauth logout deletes the token and keeps the key and the registration")
    func logoutKeepsKey() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "alice").status == 0)
            let directory = try machine.keyDirectory()
            #expect(FileManager.default.fileExists(atPath: directory + "/token.json"))
            let logout = try machine.run(["logout"])
            #expect(logout.status == 0, "\(logout.standardError)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/token.json"))
            #expect(FileManager.default.fileExists(atPath: directory + "/device-key.pem"))
            #expect(FileManager.default.fileExists(atPath: directory + "/account.json"))
            let status = try machine.run(["status"])
            #expect(status.standardOutput.contains("token:       none"))
            #expect(status.standardOutput.contains("status:      active"))
            // The registration is intact: logging in again needs nothing but the key.
            #expect(try machine.run(["login"]).status == 0)
            #expect(try machine.run(["logout"]).status == 0)
            let second = try machine.run(["logout"])
            #expect(second.standardOutput.contains("No access token was stored"))
            // A token others can read is the one file to forget at once: it is deleted unread.
            #expect(try machine.run(["login"]).status == 0)
            #expect(chmod(directory + "/token.json", 0o644) == 0)
            let exposed = try machine.run(["logout"])
            #expect(exposed.status == 0, "\(exposed.standardError)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/token.json"))
        }
    }

    @Test("a rate-limited login exits 75 with its own message and the wait")
    func rateLimited() throws {
        let responder = try LoopbackHTTPResponder { _ in
            var response = LoopbackHTTPResponder.Response.oauthError(429, "slow_down", "too many failed attempts")
            response.headers["Retry-After"] = "42"
            return response
        }
        defer { responder.stop() }
        let machine = try Machine.withStoredAccount(server: "http://127.0.0.1:\(responder.port)")
        defer { machine.home.remove() }
        let login = try machine.run(["login"])
        #expect(login.status == 75)
        expectOneErrorLine(login)
        #expect(login.standardError.contains("rate-limited"))
        #expect(login.standardError.contains("try again in 42 s"))
    }

    @Test(
        "register at a URL that is not a keyauth server names the URL, exits 1 and stores nothing",
        arguments: [404, 401, 403])
    func notKeyAuth(_ status: Int) throws {
        // A 401 or 403 (a site behind a login) is no login refused: not 77.
        let responder = try LoopbackHTTPResponder { _ in
            LoopbackHTTPResponder.Response(
                status: status, headers: ["Content-Type": "text/html"], body: Array("<h1>No</h1>".utf8))
        }
        defer { responder.stop() }
        let machine = Machine()
        defer { machine.home.remove() }
        let url = "http://127.0.0.1:\(responder.port)"
        let register = try machine.register(url: url, user: "alice")
        #expect(register.status == 1)
        expectOneErrorLine(register)
        #expect(register.standardError.contains("\(url) does not look like a keyauth server"))
        #expect(register.standardError.contains("GET \(url)/.well-known/openid-configuration"))
        #expect(machine.accounts.accountNames().isEmpty)
    }

    @Test("a key the server refuses is recorded, status says so, and reset deletes it here without the PIN")
    func refusedDevice() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "alice", pin: "246813").status == 0)
            let name = try machine.accounts.resolve(nil)
            let keyID = try #require(try machine.accounts.load(name).keyID)
            // The device revokes itself with its stored token, then forgets the token.
            let revoke = try machine.run(["devices", "revoke", keyID])
            #expect(revoke.status == 0, "\(revoke.standardError)")
            #expect(try machine.run(["logout"]).status == 0)

            let login = try machine.run(["login", "--pin-stdin"], standardInput: "246813\n")
            #expect(login.status == 77)
            expectOneErrorLine(login)
            #expect(login.standardError.contains("invalid_grant"))
            #expect(login.standardError.contains("run `keyauth reset --account \(name)`"))
            #expect(try machine.accounts.load(name).refusedAt != nil)

            let status = try machine.run(["status"])
            #expect(status.standardOutput.contains("status:      refused by the server at "))
            #expect(status.standardOutput.contains("revoked, or unknown to this server"))
            let json = try machine.run(["status", "--json"])
            let entry = try #require(try JSONValue(parsing: json.standardOutput)["accounts"]?.arrayValue?.first)
            #expect(entry["refused_at"]?.stringValue != nil)

            // No --pin-stdin and no terminal: a PIN could not be asked, and none is needed.
            let reset = try machine.run(["reset"])
            #expect(reset.status == 0, "\(reset.standardError)")
            #expect(reset.standardOutput.contains("The server refused this device at "))
            #expect(!machine.accounts.exists(name))
        }
    }

    @Test("a login the server refuses drops the stored token, which the server would refuse too")
    func refusedDeviceDropsToken() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "alice").status == 0)
            let keyID = try #require(try machine.accounts.load(try machine.accounts.resolve(nil)).keyID)
            // Revoked elsewhere (an administrator), so the device still holds a valid token.
            let database = URL(fileURLWithPath: server.logPath).deletingLastPathComponent().path + "/server.db"
            let revoked = try KeyAuthServerProcess.runCommand(
                ["revoke", keyID, "--db", database, "--config", "/dev/null"])
            #expect(revoked.status == 0, "\(revoked.error)")
            #expect(try machine.run(["token"]).status == 0)

            #expect(try machine.run(["login"]).status == 77)
            let token = try machine.run(["token"])
            #expect(token.status == 77, "\(token.standardOutput)")
            #expect(token.standardOutput.isEmpty)
            #expect(token.standardError.contains("run `keyauth reset"), "\(token.standardError)")
            #expect(try machine.run(["status"]).standardOutput.contains("token:       none"))
        }
    }

    @Test("a login refused in the seconds after the server's crash restart is not taken for a revoked device")
    func crashRestartIsNoRefusal() throws {
        let directory = TemporaryDirectory("keyauth-crash-restart")
        defer { directory.remove() }
        let database = directory.path + "/server.db"
        let crashed = try KeyAuthServerProcess.started(name: "crashed", database: database, in: directory.path)
        defer { crashed.terminate() }
        let machine = Machine()
        defer { machine.home.remove() }
        #expect(try machine.register(crashed, user: "alice").status == 0)
        let port = crashed.port
        #expect(crashed.kill())
        // The same address, so that the account's URL and issuer still name it.
        let restarted = try KeyAuthServerProcess(
            name: "restarted",
            arguments: [
                "serve", "--listen", "127.0.0.1:\(port)", "--db", database, "--enrollment", "open",
                "--metrics-listen", "off", "--quiet", "--config", "/dev/null",
            ], logPath: directory.path + "/restarted.log")
        defer { restarted.terminate() }
        try restarted.waitUntilListening()

        let login = try machine.run(["login"])
        #expect(login.status == 77)
        expectOneErrorLine(login)
        #expect(login.standardError.contains("restarted after a crash"), "\(login.standardError)")
        #expect(!login.standardError.contains("keyauth reset"), "\(login.standardError)")
        #expect(try machine.accounts.load(try machine.accounts.resolve(nil)).refusedAt == nil)
        // The token the crashed server issued is still good, and still kept.
        #expect(try machine.run(["token"]).status == 0)
        #expect(!(try machine.run(["status"]).standardOutput.contains("refused")))
    }

    @Test("reset on a terminal asks first: no keeps the account, --yes does not ask")
    func resetConfirmation() throws {
        let machine = try Machine.withStoredAccount(server: "http://127.0.0.1:9")
        defer { machine.home.remove() }
        let name = try machine.accounts.resolve(nil)
        let declined = try TerminalProcess(
            Binaries.keyauth, ["reset", "--local-only"], environment: machine.environment)
        let question = declined.readUntil("[y/N] ")
        #expect(question.contains("Delete account \(name) here, without telling the server? [y/N] "))
        declined.type("n\n")
        #expect(declined.wait() == 1)
        #expect(declined.standardError.contains("nothing was deleted"))
        #expect(machine.accounts.exists(name))
        // Ctrl-D at the question is a no too, with the same exit.
        let ended = try TerminalProcess(
            Binaries.keyauth, ["reset", "--local-only"], environment: machine.environment)
        _ = ended.readUntil("[y/N] ")
        ended.type("\u{4}")
        #expect(ended.wait() == 1)
        #expect(machine.accounts.exists(name))

        let confirmed = try TerminalProcess(
            Binaries.keyauth, ["reset", "--local-only", "--yes"], environment: machine.environment)
        #expect(confirmed.wait() == 0)
        #expect(!confirmed.readAvailable(waiting: 200).contains("[y/N]"))
        #expect(!machine.accounts.exists(name))
    }
}
