import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Registers `user` on `server` with a PIN read from standard input, recording why it failed.
private func registerWithPIN(
    _ harness: CommandHarness, _ server: InProcessKeyAuthServer, user: String = "alice", pin: String = "123456",
    extra: [String] = [], expectSuccess: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
) async -> CommandResult {
    let result = await harness.run(
        ["register", "--server", server.url, "--user", user, "--bits", "2048", "--pin-stdin"] + extra,
        standardInput: pin + "\n")
    if expectSuccess && result.status != 0 {
        Issue.record("register failed: \(result.status) \(result.standardError)", sourceLocation: sourceLocation)
    }
    return result
}

@Suite("Commands with injected I/O against the server in-process", .timeLimit(.minutes(10)))
struct CommandTests {
    @Test("--version prints the version and --help the overview")
    func versionAndHelp() async {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let version = await harness.run(["--version"])
        #expect(version.status == 0)
        #expect(version.standardOutput == "keyauth \(KeyAuthCommand.version)\n")
        let help = await harness.run(["devices", "--help"])
        #expect(help.status == 0)
        #expect(help.standardOutput.contains("approve KID"))
        #expect(help.standardError.isEmpty)
    }

    @Test("a usage error is one stderr line and exit 64")
    func usageError() async {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let result = await harness.run(["login", "--frobnicate"])
        #expect(result.status == 64)
        #expect(result.errorLines.count == 1)
        #expect(result.errorLines.first?.hasPrefix("keyauth: unknown option --frobnicate") == true)
        #expect(result.standardOutput.isEmpty)
    }

    @Test("a default account name longer than 128 characters is a usage error naming --account; nothing is kept")
    func longDefaultAccountName() async {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let host = String(repeating: "a", count: 60) + "." + String(repeating: "b", count: 60) + ".example"
        let result = await harness.run(
            ["register", "--server", "https://\(host):8443", "--user", "alice", "--presence", "none"])
        #expect(result.status == 64)
        #expect(result.errorLines.count == 1, "\(result.standardError)")
        #expect(result.standardError.contains("name the account with --account NAME"), "\(result.standardError)")
        #expect(!result.standardError.contains("is not a valid account name"))
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test("register on a terminal asks for the PIN twice and stores 0600 files in 0700 directories")
    func registerOnTerminal() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let terminal = FixedSecretReader(answers: ["246802", "246802"])
        let result = await harness.run(
            ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--name", "laptop"],
            terminal: terminal)
        #expect(result.status == 0, "\(result.standardError)")
        #expect(terminal.requests.count == 2)
        #expect(terminal.requests.last?.prompt.contains("Repeat") == true)
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        let account = try harness.accounts.load(name)
        #expect(account.status == .active)
        #expect(account.deviceName == "laptop")
        #expect(account.presence == .pin)
        #expect(account.issuer == server.url)
        let directory = try harness.accounts.directory(for: name)
        #expect(fileMode(harness.home.path + "/accounts") == 0o700)
        #expect(fileMode(directory) == 0o700)
        for file in ["account.json", "device-key.pem", "device-key.pub", "token.json"] {
            #expect(fileMode(directory + "/" + file) == 0o600, "\(file)")
        }
        #expect(try harness.accounts.defaultAccountName() == name)
        #expect(try KeyPairStore(directory: directory).isEncrypted())
        #expect(result.standardOutput.contains(account.keyID ?? "missing"))
    }

    @Test("register with --pin-stdin reads the PIN once and asks the terminal nothing")
    func registerWithStandardInput() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let terminal = FixedSecretReader(answers: [String]())
        let result = await harness.run(
            ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
            standardInput: "246802\n", terminal: terminal)
        #expect(result.status == 0, "\(result.standardError)")
        #expect(terminal.requests.isEmpty)
        #expect(!result.standardError.contains("246802"))
        #expect(!result.standardOutput.contains("246802"))
        // The registration said the key was made with a PIN, which host logins need.
        let keyID = try #require(server.keyIDs(withStatus: "active").first)
        #expect(try server.device(keyID)?.keyProtection == .pin)
    }

    @Test("two different PINs at registration leave nothing behind")
    func pinMismatch() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let result = await harness.run(
            ["register", "--server", server.url, "--user", "alice", "--bits", "2048"],
            terminal: FixedSecretReader(answers: ["246802", "135790"]))
        #expect(result.status == 64, "bad input, as at `keyauth pin change`")
        #expect(result.errorLines.count == 1)
        #expect(result.errorLines.first?.contains("Nothing was registered.") == true)
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test("a second device registers pending with --no-wait and prints one plain approval line")
    func pendingNoWait() async throws {
        try await withFirstDevice { first, second, server in
            let result = await second.run(
                [
                    "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none",
                    "--no-wait",
                ])
            // EX_TEMPFAIL: registered, and the same login succeeds once another device approves.
            #expect(result.status == 75, "\(result.standardError)")
            let pending = try #require(server.keyIDs(withStatus: "pending").first)
            // --presence none: registered as a key without a PIN.
            #expect(try server.device(pending)?.keyProtection == KeyProtection.withoutPIN)
            #expect(
                result.errorLines == [
                    "Approval needed: on a device already registered for alice, run `keyauth devices approve "
                        + "\(pending.prefix(8))` (short code \(pending.prefix(8)) of KID \(pending))"
                ])
            #expect(!result.standardError.contains("\u{1B}"))
            let name = try second.accounts.resolve(nil)
            #expect(try second.accounts.load(name).status == .pending)

            let stillPending = await second.run(["login", "--no-wait"])
            #expect(stillPending.status == 75)
            #expect(stillPending.errorLines.count == 1)
            #expect(stillPending.standardError.contains("keyauth devices approve \(pending.prefix(8))"))

            let approve = await first.run(["devices", "approve", pending, "--pin-stdin"], standardInput: "123456\n")
            #expect(approve.status == 0, "\(approve.standardError)")
            let login = await second.run(["login"])
            #expect(login.status == 0, "\(login.standardError)")
            #expect(try second.accounts.load(name).status == .active)
        }
    }

    @Test("register waits while pending and finishes once another device approves")
    func registerWaitsForApproval() async throws {
        try await withFirstDevice { first, second, server in
            async let registration = second.run(
                ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none"],
                isTerminal: true)
            var pending: String?
            for _ in 0..<1200 where pending == nil {
                try await Task.sleep(for: .milliseconds(50))
                pending = server.keyIDs(withStatus: "pending").first
            }
            let keyID = try #require(pending)
            try await Task.sleep(for: .milliseconds(200))
            try server.setStatus("active", of: keyID)
            let result = await registration
            #expect(result.status == 0, "\(result.standardError)")
            #expect(result.standardError.contains("keyauth devices approve \(keyID.prefix(8))"))
            // On a terminal a spinner is drawn and erased in place.
            #expect(result.standardError.contains("\r\u{1B}[K"))
        }
    }

    @Test("a denied registration ends the wait with exit 77 and removes the useless key")
    func deniedWhileWaiting() async throws {
        try await withFirstDevice { first, second, server in
            async let registration = second.run(
                ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none"])
            var pending: String?
            for _ in 0..<1200 where pending == nil {
                try await Task.sleep(for: .milliseconds(50))
                pending = server.keyIDs(withStatus: "pending").first
            }
            let keyID = try #require(pending)
            #expect(await first.run(["devices", "revoke", keyID]).status == 0)
            let result = await registration
            #expect(result.status == 77)
            #expect(result.errorLines.last?.hasPrefix("keyauth: ") == true)
            #expect(second.accounts.accountNames().isEmpty)
        }
    }

    @Test("a wrong PIN exits 77 with one line that does not show the PIN")
    func wrongPIN() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server, pin: "246802").status == 0)
        let wrong = await harness.run(["login", "--pin-stdin"], standardInput: "975310\n")
        #expect(wrong.status == 77)
        #expect(wrong.errorLines.count == 1)
        #expect(wrong.errorLines.first?.hasPrefix("keyauth: wrong PIN") == true)
        #expect(!wrong.standardError.contains("975310"))
        let right = await harness.run(["login", "--pin-stdin"], standardInput: "246802\n")
        #expect(right.status == 0, "\(right.standardError)")
        let none = await harness.run(["login", "--pin-stdin"])
        #expect(none.status == 77)
    }

    @Test("--pin-stdin with nothing on standard input says the PIN was expected there (exit 77)")
    func pinStandardInputEmpty() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server, pin: "246802").status == 0)
        let none = await harness.run(["login", "--pin-stdin"])
        #expect(none.status == 77)
        #expect(
            none.errorLines == ["keyauth: standard input ended before the PIN (--pin-stdin reads it from there)"],
            "\(none.standardError)")
    }

    @Test("token reuses a stored token and logs in again when it is about to expire")
    func tokenCachedAndRefreshed() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let name = try harness.accounts.resolve(nil)
        let stored = try #require(try harness.accounts.credentials.loadToken(account: name))
        let logins = server.loginCount

        let cached = await harness.run(["token", "--pin-stdin"])
        #expect(cached.status == 0, "\(cached.standardError)")
        #expect(cached.standardOutput == stored.value + "\n")
        #expect(server.loginCount == logins)

        let expiring = AccessToken(value: stored.value, expiresAt: Date().addingTimeInterval(10))
        try harness.accounts.credentials.saveToken(expiring, account: name)
        let refreshed = await harness.run(["token", "--pin-stdin"], standardInput: "123456\n")
        #expect(refreshed.status == 0, "\(refreshed.standardError)")
        #expect(refreshed.standardOutput != stored.value + "\n")
        #expect(server.loginCount == logins + 1)
        #expect(
            try harness.accounts.credentials.loadToken(account: name)?.value
                == refreshed.standardOutput.dropLast().description)
    }

    @Test("status --json describes the account and its key")
    func statusJSON() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let result = await harness.run(["status", "--json"])
        #expect(result.status == 0)
        let document = try JSONValue(parsing: result.standardOutput)
        let account = try #require(document["accounts"]?.arrayValue?.first)
        let name = try harness.accounts.resolve(nil)
        let key = try harness.accounts.keyPairStore(for: name).loadPublicKey()
        #expect(account["name"]?.stringValue == name)
        #expect(account["kid"]?.stringValue == key.fingerprint)
        #expect(account["key_bits"]?.integerValue == 2048)
        #expect(account["default"] == .bool(true))
        #expect(account["token_valid"] == .bool(true))
        #expect(account["status"]?.stringValue == "active")
        #expect(document["default"]?.stringValue == name)
        let pubkey = await harness.run(["pubkey", "--jwk"])
        #expect(try JSONValue(parsing: pubkey.standardOutput)["kid"]?.stringValue == key.fingerprint)
        let pem = await harness.run(["pubkey"])
        #expect(pem.standardOutput == key.pemRepresentation || pem.standardOutput == key.pemRepresentation + "\n")
    }

    @Test("several accounts need --account unless one is the default")
    func severalAccounts() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server, user: "alice").status == 0)
        #expect(await registerWithPIN(harness, server, user: "bob", extra: ["--account", "bob"]).status == 0)
        #expect(harness.accounts.accountNames().count == 2)
        let byDefault = await harness.run(["token"])
        #expect(byDefault.status == 0)
        try FileManager.default.removeItem(atPath: harness.home.path + "/default")
        let ambiguous = await harness.run(["token"])
        #expect(ambiguous.status == 64)
        #expect(ambiguous.standardError.contains("--account"))
        let chosen = await harness.run(["token", "--account", "bob"])
        #expect(chosen.status == 0)
        let unknown = await harness.run(["token", "--account", "carol"])
        #expect(unknown.status == 1)
    }

    @Test("a corrupt account file exits 65")
    func corruptAccount() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let name = try harness.accounts.resolve(nil)
        let file = try harness.accounts.accountFile(for: name)
        try Data("{\"name\": 3".utf8).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        for arguments in [["login"], ["status"], ["token"], ["pubkey"]] {
            let result = await harness.run(arguments)
            #expect(result.status == 65, "\(arguments)")
            #expect(result.errorLines.count == 1)
        }
        #expect(await harness.run(["reset", "--local-only"]).status == 0)
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test("a private key readable by others, or corrupt, exits 65 before any network use")
    func badKeyFiles() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(
            await harness.run([
                "register", "--server", server.url, "--user", "a", "--bits", "2048", "--presence", "none",
            ])
            .status == 0)
        try harness.accounts.credentials.deleteToken(account: try harness.accounts.resolve(nil))
        let keys = try harness.accounts.keyPairStore(for: try harness.accounts.resolve(nil))
        let logins = server.loginCount
        chmod(keys.privateKeyPath, 0o644)
        let unprotected = await harness.run(["login"])
        #expect(unprotected.status == 65)
        #expect(unprotected.standardError.contains("UNPROTECTED"))
        try Data("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n".utf8)
            .write(to: URL(fileURLWithPath: keys.privateKeyPath))
        chmod(keys.privateKeyPath, 0o600)
        let corrupt = await harness.run(["token"])
        #expect(corrupt.status == 65)
        #expect(corrupt.errorLines.count == 1)
        #expect(server.loginCount == logins)
    }

    @Test("an unreachable server exits 69 and reset --local-only still cleans up")
    func serverDown() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer { harness.home.remove() }
        #expect(
            await harness.run([
                "register", "--server", server.url, "--user", "a", "--bits", "2048", "--presence", "none",
            ])
            .status == 0)
        server.stop()
        let closed = ClosedPort(port: UInt16(URLComponents(string: server.url)?.port ?? 0))
        defer { withExtendedLifetime(closed) {} }
        let login = await harness.run(["login"])
        #expect(login.status == 69)
        #expect(login.errorLines.count == 1)
        #expect(login.errorLines.first?.contains("connection refused") == true)
        let reset = await harness.run(["reset"])
        #expect(reset.status == 69)
        #expect(reset.standardError.contains("--local-only"))
        #expect(harness.accounts.accountNames().count == 1)
        #expect(await harness.run(["reset", "--local-only"]).status == 0)
        #expect(harness.accounts.accountNames().isEmpty)
        let register = await harness.run(["register", "--server", server.url, "--user", "a", "--presence", "none"])
        #expect(register.status == 69)
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test("reset revokes the key on the server before deleting it here")
    func resetRevokes() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let name = try harness.accounts.resolve(nil)
        let keyID = try harness.accounts.keyPairStore(for: name).loadPublicKey().fingerprint
        let reset = await harness.run(["reset", "--pin-stdin"])
        #expect(reset.status == 0, "\(reset.standardError)")
        #expect(server.status(of: keyID) == "revoked")
        #expect(!FileManager.default.fileExists(atPath: try harness.accounts.directory(for: name)))
        #expect(!FileManager.default.fileExists(atPath: harness.home.path + "/default"))
    }

    @Test("devices list shows this device and --json parses")
    func devicesList() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let table = await harness.run(["devices"])
        #expect(table.status == 0)
        #expect(table.standardOutput.contains("* this device"))
        let json = await harness.run(["devices", "list", "--json"])
        let devices = try #require(try JSONValue(parsing: json.standardOutput)["devices"]?.arrayValue)
        #expect(devices.count == 1)
        #expect(devices.first?["this_device"] == .bool(true))
    }

    @Test("a refused stored token is replaced by a new login once")
    func invalidStoredToken() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let name = try harness.accounts.resolve(nil)
        try harness.accounts.credentials.saveToken(
            AccessToken(value: "stale.to.ken", expiresAt: Date().addingTimeInterval(600)), account: name)
        let result = await harness.run(["devices", "--pin-stdin"], standardInput: "123456\n")
        #expect(result.status == 0, "\(result.standardError)")
        #expect(try harness.accounts.credentials.loadToken(account: name)?.value != "stale.to.ken")
    }

    @Test("register refuses an account that already has a key")
    func registerTwice() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await registerWithPIN(harness, server).status == 0)
        let again = await registerWithPIN(harness, server, expectSuccess: false)
        #expect(again.status == 1)
        #expect(again.standardError.contains("already has a device key"))
    }

    @Test("PAM presence: the account remembers the service, and a denying stack exits 77")
    func pamPresence() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        let pam = TemporaryDirectory("keyauth-pam")
        defer {
            server.stop()
            harness.home.remove()
            pam.remove()
        }
        let permit = "auth required pam_permit.so\naccount required pam_permit.so\n"
        let deny = "auth required pam_deny.so\naccount required pam_deny.so\n"
        try permit.write(toFile: pam.path + "/keyauth-test", atomically: true, encoding: .utf8)
        try deny.write(toFile: pam.path + "/keyauth-deny", atomically: true, encoding: .utf8)

        let refused = await harness.run(
            [
                "register", "--server", server.url, "--user", "pat", "--bits", "2048", "--presence", "pam",
                "--pam-service", "keyauth-deny",
            ], pamDirectory: pam.path)
        #expect(refused.status == 77)
        #expect(refused.errorLines.count == 1)
        #expect(harness.accounts.accountNames().isEmpty)

        let registered = await harness.run(
            [
                "register", "--server", server.url, "--user", "pat", "--bits", "2048", "--presence", "pam",
                "--pam-service", "keyauth-test",
            ], pamDirectory: pam.path)
        #expect(registered.status == 0, "\(registered.standardError)")
        let name = try harness.accounts.resolve(nil)
        let account = try harness.accounts.load(name)
        #expect(account.presence == .pam)
        #expect(account.pamService == "keyauth-test")
        #expect(await harness.run(["login"], pamDirectory: pam.path).status == 0)

        try deny.write(toFile: pam.path + "/keyauth-test", atomically: true, encoding: .utf8)
        let denied = await harness.run(["login"], pamDirectory: pam.path)
        #expect(denied.status == 77)
        #expect(denied.errorLines.count == 1)
        #expect(denied.standardError.contains("PAM"))
    }

    @Test("PAM presence with a TPM key: the key has no authorization value, and PAM gates every login")
    func pamPresenceWithTPM() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let harness = CommandHarness(tcti: tpm.tcti)
        let server = try InProcessKeyAuthServer()
        let pam = TemporaryDirectory("keyauth-pam")
        defer {
            server.stop()
            harness.home.remove()
            pam.remove()
        }
        let service = pam.path + "/keyauth-test"
        try "auth required pam_permit.so\naccount required pam_permit.so\n".write(
            toFile: service, atomically: true, encoding: .utf8)
        let registered = await harness.run(
            [
                "register", "--server", server.url, "--user", "pat", "--bits", "2048", "--presence", "pam",
                "--pam-service", "keyauth-test",
            ], pamDirectory: pam.path)
        #expect(registered.status == 0, "\(registered.standardError)")
        #expect(registered.standardOutput.hasPrefix("Key store: TPM (IBM)\n"))
        let keys = try harness.accounts.keyPairStore(for: try harness.accounts.resolve(nil))
        #expect(try !keys.loadTPMKey().key.requiresPIN)
        #expect(await harness.run(["login"], pamDirectory: pam.path).status == 0)

        try "auth required pam_deny.so\naccount required pam_deny.so\n".write(
            toFile: service, atomically: true, encoding: .utf8)
        let logins = server.loginCount
        let denied = await harness.run(["login"], pamDirectory: pam.path)
        #expect(denied.status == 77)
        #expect(denied.standardError.contains("PAM"))
        #expect(server.loginCount == logins)
    }

    @Test("token and devices do not wait for approval, and reset of a never-approved device skips revocation")
    func pendingDoesNotWait() async throws {
        try await withFirstDevice { first, second, server in
            let registered = await second.run(
                [
                    "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none",
                    "--no-wait",
                ])
            #expect(registered.status == 75)
            let pending = try #require(server.keyIDs(withStatus: "pending").first)
            for arguments in [["token"], ["devices"]] {
                let result = await second.run(arguments)
                #expect(result.status == 75, "\(arguments)")
                #expect(result.errorLines.count == 1)
                #expect(result.standardError.contains("keyauth devices approve \(pending.prefix(8))"))
            }
            let reset = await second.run(["reset"])
            #expect(reset.status == 0, "\(reset.standardError)")
            #expect(reset.standardOutput.contains("nothing to revoke"))
            #expect(second.accounts.accountNames().isEmpty)
        }
    }

    @Test("a PIN without a terminal and without --pin-stdin exits 77 before generating anything")
    func noTerminal() async throws {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let result = await harness.run(
            ["register", "--server", "http://127.0.0.1:9", "--user", "a"], terminal: UnavailableReader())
        #expect(result.status == 77)
        #expect(result.standardError.contains("--pin-stdin"))
    }

    @Test("a malformed KEYAUTH_TPM_TCTI is a usage error where a TPM would be asked, and --key-store file ignores it")
    func malformedTCTI() async throws {
        let harness = CommandHarness(tcti: "device:/dev/tpmrm0\nmssim:")
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let automatic = await harness.registerUnattended(server.url)
        #expect(automatic.status == 64)
        #expect(automatic.errorLines.count == 1)
        #expect(automatic.standardError.contains("KEYAUTH_TPM_TCTI"))
        #expect(harness.accounts.accountNames().isEmpty)
        let file = await harness.registerUnattended(server.url, extra: ["--key-store", "file"])
        #expect(file.status == 0, "\(file.standardError)")
        #expect(file.standardOutput.hasPrefix("Key store: file\n"))
        #expect(await harness.run(["login"]).status == 0)
        #expect(await harness.run(["status"]).standardOutput.contains("  key store:   file\n"))
    }
}

/// A terminal reader for a process that has no terminal.
private struct UnavailableReader: SecretReader {
    func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        throw KeyAuthError(.presenceUnavailable, "no terminal")
    }

    func isAvailable() -> Bool { false }
}
