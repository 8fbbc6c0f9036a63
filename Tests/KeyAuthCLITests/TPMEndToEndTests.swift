import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The parts of one account's TPM key on disk.
private struct AccountFiles: Equatable {
    let blob: Data
    let publicKey: Data
    let account: Data

    init(_ directory: String) throws {
        blob = try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.tpm"))
        publicKey = try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.pub"))
        account = try Data(contentsOf: URL(fileURLWithPath: directory + "/account.json"))
    }
}

/// The first account of `status --json`.
private func statusEntry(_ machine: Machine) throws -> JSONValue {
    let status = try machine.run(["status", "--json"])
    #expect(status.status == 0, "\(status.standardError)")
    return try #require(try JSONValue(parsing: status.standardOutput)["accounts"]?.arrayValue?.first)
}

/// How many signatures the TPM made for a run of `keyauth` with `TSS2_LOG=esys+trace`: the TPM
/// stack logs each `Esys_Sign` call once on standard error.
private func tpmSignatures(in result: CommandResult) -> Int {
    result.errorLines.filter { $0.contains("Esys_Sign_Async(") }.count
}

/// The PIN of every TPM account in these tests: 4 characters, enough for a TPM key.
private let pin = "2468"

extension Machine {
    /// `keyauth login --pin-stdin` with `pin`.
    fileprivate func login(pin: String) throws -> CommandResult {
        try run(["login", "--pin-stdin"], standardInput: pin + "\n")
    }
}

/// Runs `body` with a fresh software TPM, a fresh server, and a machine on that TPM where `user`
/// has registered with ``pin``.
private func withTPMAccount(
    user: String, _ body: (SoftwareTPM, KeyAuthServerProcess, Machine) throws -> Void
) throws {
    let tpm = try SoftwareTPM()
    defer { withExtendedLifetime(tpm) {} }
    try withServer { server in
        let machine = Machine(tpm: tpm)
        defer { machine.home.remove() }
        let registered = try machine.register(server, user: user, pin: pin)
        try #require(registered.status == 0, "\(registered.standardError)")
        try body(tpm, server, machine)
    }
}

/// Runs `body` with a fresh software TPM, the server's responder in-process (which counts the
/// logins it was asked for), and a machine on that TPM.
private func withTPMAndCountingServer(_ body: (SoftwareTPM, InProcessKeyAuthServer, Machine) throws -> Void) throws {
    let tpm = try SoftwareTPM()
    defer { withExtendedLifetime(tpm) {} }
    let server = try InProcessKeyAuthServer()
    let machine = Machine(tpm: tpm)
    defer {
        server.stop()
        machine.home.remove()
    }
    try body(tpm, server, machine)
}

/// The built `keyauth` with keys held by a software TPM (swtpm), against a real server: each test
/// starts its own TPMs with fresh states, so lockout counters never leak between tests.
@Suite("The built keyauth binary with a software TPM", .serialized, .timeLimit(.minutes(10)))
struct TPMEndToEndTests {
    @Test("register and log in with a TPM key and a 4-character PIN; only the TPM's blob is stored")
    func registerAndLogin() throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try withServer { server in
            let machine = Machine(tpm: tpm)
            defer { machine.home.remove() }
            let registered = try machine.run(
                ["register", "--server", server.url, "--user", "alice", "--pin-stdin"], standardInput: pin + "\n")
            #expect(registered.status == 0, "\(registered.standardError)")
            #expect(registered.standardOutput.hasPrefix("Key store: TPM (IBM)\n"))
            #expect(!registered.standardOutput.contains(pin))

            let directory = try machine.keyDirectory()
            let account = try machine.accounts.load(try machine.accounts.resolve(nil))
            #expect(account.keyStore == .tpm)
            let accountJSON = try JSONValue(
                parsing: Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/account.json"))))
            #expect(accountJSON["key_store"]?.stringValue == "tpm")
            #expect(fileMode(directory + "/device-key.tpm") == 0o600)
            #expect(!FileManager.default.fileExists(atPath: directory + "/device-key.pem"))

            // The stored file is the TPM's blob, and no RSA private key in any form.
            let blob = Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.tpm")))
            let pem = String(decoding: blob, as: UTF8.self)
            #expect(pem.hasPrefix("-----BEGIN TSS2 PRIVATE KEY-----\n"))
            #expect(pem.components(separatedBy: "PRIVATE KEY-----").count == 3, "one BEGIN and one END, nothing else")
            let publicKey = try machine.accounts.keyPairStore(for: account.name).loadPublicKey()
            #expect(publicKey.bits == 3072, "3072 bits where the TPM supports it")
            #expect(try RSAPrimeSearch.factorsFound(in: RSAPrimeSearch.der(ofPEM: blob), of: publicKey) == 0)
            let asn1 = try ExternalCommand.run(["openssl", "asn1parse", "-in", directory + "/device-key.tpm"])
            #expect(asn1.output.contains(":2.23.133.10.1.3"))
            #expect(!asn1.output.contains("rsaEncryption"))
            #expect(try ExternalCommand.run(["openssl", "pkey", "-in", directory + "/device-key.tpm"]).status != 0)

            let login = try machine.login(pin: pin)
            #expect(login.status == 0, "\(login.standardError)")
            let token = try machine.run(["token", "--pin-stdin"])
            let claims = try CompactJWS(parsing: token.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines))
                .claims()
            // A Bearer token where DPoP is optional: the device key is its client_id.
            #expect(claims["client_id"]?.stringValue == publicKey.fingerprint)
            #expect(!FileManager.default.fileExists(atPath: directory + "/pin-attempts"), "the TPM counts PINs")

            let status = try machine.run(["status"])
            #expect(status.standardOutput.contains("  key store:   tpm (manufacturer IBM)\n"))
            let entry = try statusEntry(machine)
            #expect(entry["key_store"]?.stringValue == "tpm")
            #expect(entry["tpm_manufacturer"]?.stringValue == "IBM")
            #expect(entry["tpm_available"] == .bool(true))
        }
    }

    @Test("a login signs once in the TPM, and its assertion verifies with stock OpenSSL and PyJWT")
    func assertionVerifiesElsewhere() throws {
        try withTPMAndCountingServer { _, server, machine in
            let trace = ["TSS2_LOG": "esys+trace"]
            let registered = try machine.run(
                ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
                standardInput: pin + "\n", extraEnvironment: trace)
            #expect(registered.status == 0, "\(registered.standardError)")
            #expect(
                tpmSignatures(in: registered) == 3,
                "a proof of possession for each of the attested registration's two requests, then the first login")
            #expect(registered.errorLines.contains { $0.contains("Esys_Certify_Async(") })
            #expect(registered.errorLines.contains { $0.contains("Esys_ActivateCredential_Async(") })
            let login = try machine.run(["login", "--pin-stdin"], standardInput: pin + "\n", extraEnvironment: trace)
            #expect(login.status == 0, "\(login.standardError)")
            #expect(tpmSignatures(in: login) == 1)

            let body = try #require(server.requests.last(where: { $0.method == "POST" && $0.path == "/oauth/token" }))
                .bodyText
            let field = try #require(body.split(separator: "&").first { $0.hasPrefix("assertion=") })
            let assertion = String(field.dropFirst("assertion=".count))
            let parts = assertion.split(separator: ".")
            try #require(parts.count == 3)
            let scratch = TemporaryDirectory()
            defer { scratch.remove() }
            let publicKeyPEM = try machine.run(["pubkey"]).standardOutput
            try Data(publicKeyPEM.utf8).write(to: URL(fileURLWithPath: scratch.path + "/key.pub"))
            try Data((parts[0] + "." + parts[1]).utf8).write(to: URL(fileURLWithPath: scratch.path + "/input"))
            try Data(try #require(Base64URL.decode(parts[2]))).write(
                to: URL(fileURLWithPath: scratch.path + "/signature"))
            let verified = try ExternalCommand.run([
                "openssl", "dgst", "-sha256", "-verify", scratch.path + "/key.pub", "-signature",
                scratch.path + "/signature", scratch.path + "/input",
            ])
            #expect(verified.status == 0, "\(verified.errorOutput)")
            #expect(verified.output.contains("Verified OK"))

            let script = """
                import sys, jwt
                claims = jwt.decode(sys.argv[1], sys.argv[2], algorithms=["RS256"], audience=sys.argv[3])
                print(claims["sub"] == jwt.get_unverified_header(sys.argv[1])["kid"])
                """
            let pyjwt = try ExternalCommand.run(["/usr/bin/python3", "-c", script, assertion, publicKeyPEM, server.url])
            #expect(pyjwt.status == 0, "\(pyjwt.errorOutput)")
            #expect(pyjwt.output == "True\n")
        }
    }

    @Test("keyauth proof signs a DPoP proof in the TPM, after its PIN, with the device key")
    func proofWithTPMKey() throws {
        try withTPMAccount(user: "carol") { _, server, machine in
            let url = server.url + "/v1/devices"
            let proof = try machine.run(["proof", "GET", url, "--pin-stdin"], standardInput: pin + "\n")
            #expect(proof.status == 0, "\(proof.standardError)")
            let account = try machine.accounts.load(try machine.accounts.resolve(nil))
            let publicKey = try machine.accounts.keyPairStore(for: account.name).loadPublicKey()
            let verified = try DPoPProofVerifier().verify(
                proof.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines), method: "GET", url: url)
            #expect(verified.keyThumbprint == publicKey.fingerprint)
        }
    }

    @Test("a wrong PIN is refused and counted by the TPM, and the right one still logs in")
    func wrongPIN() throws {
        try withTPMAndCountingServer { tpm, server, machine in
            #expect(try machine.register(url: server.url, user: "bob", pin: pin).status == 0)
            let before = server.loginCount
            let wrong = try machine.login(pin: "1357")
            #expect(wrong.status == 77)
            #expect(wrong.errorLines == ["keyauth: wrong PIN; the TPM locks out after 2 more wrong PINs"])
            #expect(!wrong.standardError.contains("1357"))
            #expect(try tpm.connection.info().lockoutCounter == 1)
            #expect(server.loginCount == before, "nothing was sent")
            #expect(!FileManager.default.fileExists(atPath: try machine.keyDirectory() + "/pin-attempts"))

            let right = try machine.login(pin: pin)
            #expect(right.status == 0, "\(right.standardError)")
        }
    }

    @Test("login on a terminal asks again after a wrong PIN the TPM refused, and stops when the TPM locks")
    func loginAsksAgainOnTerminal() throws {
        try withTPMAndCountingServer { tpm, server, machine in
            #expect(try machine.register(url: server.url, user: "tess", pin: pin).status == 0)
            let before = server.loginCount
            let process = try TerminalProcess(Binaries.keyauth, ["login"], environment: machine.environment)
            _ = process.readUntil("PIN: ")
            process.type("1357\n")
            #expect(process.readUntil("PIN: ").contains("wrong PIN; the TPM locks out after 2 more wrong PINs"))
            process.type(pin + "\n")
            #expect(process.wait() == 0, "\(process.standardError)")
            #expect(server.loginCount == before + 1, "one assertion, signed with the right PIN")
            #expect(try tpm.connection.info().lockoutCounter == 1)

            // The PIN that locks the TPM ends the run: the lock refuses any PIN.
            let locking = try TerminalProcess(Binaries.keyauth, ["login"], environment: machine.environment)
            _ = locking.readUntil("PIN: ")
            locking.type("1357\n")
            #expect(locking.readUntil("PIN: ").contains("the TPM locks out after 1 more wrong PIN"))
            locking.type("0000\n")
            #expect(locking.wait() == 77)
            #expect(locking.standardError.contains("the TPM is now locked"), "\(locking.standardError)")
            #expect(!locking.readAvailable(waiting: 200).contains("PIN: "))
            #expect(server.loginCount == before + 1)
        }
    }

    @Test("proof with a stored token asks again on a terminal after a wrong PIN the TPM refused")
    func proofAsksAgainOnTerminal() throws {
        try withTPMAccount(user: "paul") { tpm, server, machine in
            #expect(try machine.login(pin: pin).status == 0)
            let process = try TerminalProcess(
                Binaries.keyauth, ["proof", "GET", server.url + "/api/me"], environment: machine.environment)
            _ = process.readUntil("PIN: ")
            process.type("1357\n")
            #expect(process.readUntil("PIN: ").contains("wrong PIN; the TPM locks out after 2 more wrong PINs"))
            process.type(pin + "\n")
            #expect(process.wait() == 0, "\(process.standardError)")
            let proof = process.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(proof.split(separator: ".").count == 3, "one compact JWS: \(proof)")
            #expect(try tpm.connection.info().lockoutCounter == 1)

            // Ctrl-D at the next prompt ends the run with the refusal, as at a login.
            let ended = try TerminalProcess(
                Binaries.keyauth, ["proof", "GET", server.url + "/api/me"], environment: machine.environment)
            _ = ended.readUntil("PIN: ")
            ended.type("1357\n")
            #expect(ended.readUntil("PIN: ").contains("the TPM locks out after 1 more wrong PIN"))
            ended.type("\u{4}")
            #expect(ended.wait() == 77)
            #expect(ended.standardError.contains("wrong PIN"), "\(ended.standardError)")
            #expect(ended.standardOutput.isEmpty)

            // One PIN from standard input, as before: a wrong one ends the run.
            let once = try machine.run(
                ["proof", "GET", server.url + "/api/me", "--pin-stdin"], standardInput: "1357\n")
            #expect(once.status == 77)
            #expect(
                once.errorLines == [
                    "keyauth: wrong PIN; the TPM is now locked and refuses its keys for up to 1000 seconds"
                        + KeyAuthCommand.forgotPINPointer
                ])
        }
    }

    @Test("repeated wrong PINs reach the TPM's lockout, and the command says how long it lasts")
    func lockout() throws {
        try withTPMAccount(user: "carol") { tpm, _, machine in
            var messages: [String] = []
            for _ in 0..<3 {
                let wrong = try machine.login(pin: "0000")
                #expect(wrong.status == 77)
                expectOneErrorLine(wrong)
                messages += wrong.errorLines
            }
            #expect(
                messages == [
                    "keyauth: wrong PIN; the TPM locks out after 2 more wrong PINs",
                    "keyauth: wrong PIN; the TPM locks out after 1 more wrong PIN",
                    "keyauth: wrong PIN; the TPM is now locked and refuses its keys for up to 1000 seconds"
                        + KeyAuthCommand.forgotPINPointer,
                ])
            let info = try tpm.connection.info()
            #expect(info.isLockedOut)
            // Now even the right PIN is refused, by the TPM, with its wait.
            let locked = try machine.login(pin: pin)
            #expect(locked.status == 77)
            #expect(
                locked.errorLines == [
                    "keyauth: the TPM is locked after too many wrong PINs and refuses its keys for up to 1000 seconds"
                        + KeyAuthCommand.forgotPINPointer
                ])
            let status = try machine.run(["status"])
            #expect(status.standardOutput.contains("tpm (manufacturer IBM, locked after too many wrong PINs)"))
        }
    }

    @Test("the account's whole directory copied to another TPM, or to a machine without one, cannot sign")
    func copiedDirectory() throws {
        let tpm = try SoftwareTPM()
        let otherTPM = try SoftwareTPM()
        defer { withExtendedLifetime((tpm, otherTPM)) {} }
        let server = try InProcessKeyAuthServer()
        let machine = Machine(tpm: tpm)
        let thief = Machine(tpm: otherTPM)
        let noTPM = Machine()
        defer {
            server.stop()
            machine.home.remove()
            thief.home.remove()
            noTPM.home.remove()
        }
        #expect(try machine.register(url: server.url, user: "dave", pin: pin).status == 0)
        let name = try machine.accounts.resolve(nil)
        for copy in [thief, noTPM] {
            try FileManager.default.copyItem(
                atPath: machine.home.path + "/accounts", toPath: copy.home.path + "/accounts")
            // Without the stored token: the copy must sign to log in.
            try FileManager.default.removeItem(atPath: copy.home.path + "/accounts/" + name + "/token.json")
        }
        let before = server.loginCount
        let elsewhere = try thief.login(pin: pin)
        #expect(elsewhere.status == 65)
        expectOneErrorLine(elsewhere)
        #expect(elsewhere.standardError.contains("made by another TPM"))
        #expect(elsewhere.standardError.contains(otherTPM.tcti))
        let nowhere = try noTPM.login(pin: pin)
        #expect(nowhere.status == 69)
        #expect(nowhere.standardError.contains(SoftwareTPM.absentTCTI))
        #expect(server.loginCount == before, "no assertion was made")
        // The original still logs in.
        #expect(try machine.login(pin: pin).status == 0)
    }

    @Test("a TPM that stops gives exit 69 naming its TCTI and loses nothing; once back, logins work")
    func tpmStopped() throws {
        try withTPMAccount(user: "erin") { tpm, server, machine in
            let directory = try machine.keyDirectory()
            let before = try AccountFiles(directory)
            tpm.stop()

            let login = try machine.login(pin: pin)
            #expect(login.status == 69)
            expectOneErrorLine(login)
            #expect(login.standardError.contains("the TPM at \(tpm.tcti) is unavailable"))
            // A stored token needs no TPM, and status still reports, saying the TPM is gone.
            #expect(try machine.run(["token", "--pin-stdin"]).status == 0)
            let status = try machine.run(["status"])
            #expect(status.status == 0)
            #expect(status.standardOutput.contains("key store:   tpm (the TPM at \(tpm.tcti) is unavailable"))
            let entry = try statusEntry(machine)
            #expect(entry["tpm_available"] == .bool(false))
            #expect(entry["tpm_manufacturer"] == .null)
            // Registering another account in the TPM is refused before anything is stored.
            let second = try machine.run(
                ["register", "--server", server.url, "--user", "erin2", "--key-store", "tpm", "--presence", "none"])
            #expect(second.status == 69)
            #expect(second.standardError.contains(tpm.tcti))
            #expect(machine.accounts.accountNames().count == 1)
            #expect(try AccountFiles(directory) == before)

            try tpm.start()
            let again = try machine.login(pin: pin)
            #expect(again.status == 0, "\(again.standardError)")
        }
    }

    @Test("a TPM that stops while a login waits at its PIN prompt gives exit 69, and the account is unchanged")
    func tpmStoppedDuringLogin() throws {
        try withTPMAndCountingServer { tpm, server, machine in
            try #require(try machine.register(url: server.url, user: "erin", pin: pin).status == 0)
            let name = try machine.accounts.resolve(nil)
            // Without the stored token, as after it expired: this login must sign.
            try machine.accounts.credentials.deleteToken(account: name)
            let directory = try machine.keyDirectory()
            let before = try AccountFiles(directory)
            let entries = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            let logins = server.loginCount

            let process = try TerminalProcess(Binaries.keyauth, ["login"], environment: machine.environment)
            let shown = process.readUntil("PIN: ")
            try #require(shown.hasSuffix("PIN: "), "\(shown.debugDescription) \(process.standardError)")
            tpm.stop()
            process.type(pin + "\n")
            #expect(process.wait() == 69)
            let errorLines = process.standardError.split(separator: "\n")
            #expect(errorLines.count == 1, "\(errorLines)")
            #expect(process.standardError.contains("the TPM at \(tpm.tcti) is unavailable"))
            #expect(!process.standardError.contains(pin))
            #expect(try AccountFiles(directory) == before)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == entries)
            #expect(server.loginCount == logins, "no assertion reached the server")

            try tpm.start()
            let again = try machine.login(pin: pin)
            #expect(again.status == 0, "\(again.standardError)")
            #expect(server.loginCount == logins + 1)
        }
    }

    @Test("pin change gives the TPM key a new PIN: it logs in, the old one is refused, the key ID stays")
    func pinChange() throws {
        try withTPMAccount(user: "paul") { tpm, _, machine in
            let directory = try machine.keyDirectory()
            let before = try AccountFiles(directory)
            let newPIN = "9753"

            let wrong = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "1357\n\(newPIN)\n")
            #expect(wrong.status == 77)
            #expect(wrong.errorLines == ["keyauth: wrong PIN; the TPM locks out after 2 more wrong PINs"])
            #expect(!wrong.standardError.contains("1357") && !wrong.standardError.contains(newPIN))
            #expect(try AccountFiles(directory) == before, "the key file is byte-identical")
            #expect(try tpm.connection.info().lockoutCounter == 1, "counted once, as a login's wrong PIN is")
            #expect(!FileManager.default.fileExists(atPath: directory + "/pin-attempts"), "the TPM counts PINs")

            // A TPM's authorization value holds 32 bytes: a longer new PIN is bad input, not a failure.
            let tooLong = try machine.run(
                ["pin", "change", "--pin-stdin"], standardInput: "\(pin)\n\(String(repeating: "7", count: 33))\n")
            #expect(tooLong.status == 64, "\(tooLong.standardError)")
            #expect(
                tooLong.standardError.contains("has at most 32 bytes. The PIN is unchanged."),
                "\(tooLong.standardError)")
            #expect(try AccountFiles(directory) == before)

            let change = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "\(pin)\n\(newPIN)\n")
            #expect(change.status == 0, "\(change.standardError)")
            #expect(change.standardOutput.contains("Changed the PIN of account"))
            #expect(!change.standardOutput.contains(newPIN) && !change.standardError.contains(newPIN))
            #expect(try tpm.connection.info().lockoutCounter == 1, "the right PIN cost the TPM's lockout nothing")
            let after = try AccountFiles(directory)
            #expect(after.blob != before.blob)
            #expect(after.publicKey == before.publicKey)
            #expect(after.account == before.account, "the registration and its key ID stay")
            #expect(fileMode(directory + "/device-key.tpm") == 0o600)
            let transient = try ExternalCommand.run(["tpm2_getcap", "-T", tpm.tcti, "handles-transient"])
            #expect(transient.output.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "nothing left loaded")

            let old = try machine.login(pin: pin)
            #expect(old.status == 77)
            #expect(old.errorLines == ["keyauth: wrong PIN; the TPM locks out after 1 more wrong PIN"])
            let login = try machine.login(pin: newPIN)
            #expect(login.status == 0, "\(login.standardError)")
        }
    }

    @Test(
        "pin change on a terminal asks again after a wrong current PIN, which the TPM counts once, and a new one too long"
    )
    func pinChangeOnTerminal() throws {
        try withTPMAccount(user: "rita") { tpm, _, machine in
            let process = try TerminalProcess(Binaries.keyauth, ["pin", "change"], environment: machine.environment)
            #expect(process.readUntil("PIN: ").contains("Current PIN of account"))
            process.type("1357\n")
            #expect(process.readUntil("PIN: ").contains("wrong PIN; the TPM locks out after 2 more wrong PINs"))
            process.type(pin + "\n")
            #expect(process.readUntil("characters): ").contains("New PIN (at least 4 characters): "))
            process.type(String(repeating: "7", count: 33) + "\n")
            #expect(process.readUntil("characters): ").contains("This key's PIN has at most 32 bytes. Try again."))
            process.type("9753\n")
            _ = process.readUntil("Repeat the new PIN: ")
            process.type("9753\n")
            #expect(process.wait() == 0, "\(process.standardError)")
            #expect(try tpm.connection.info().lockoutCounter == 1)
            #expect(try machine.login(pin: "9753").status == 0)
        }
    }

    @Test("register on a terminal asks again for a new TPM PIN too long, before making the key")
    func registerLongPINOnTerminal() throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try withServer { server in
            let machine = Machine(tpm: tpm)
            defer { machine.home.remove() }
            let process = try TerminalProcess(
                Binaries.keyauth,
                ["register", "--server", server.url, "--user", "uma", "--bits", "2048", "--key-store", "tpm"],
                environment: machine.environment)
            _ = process.readUntil("characters): ")
            process.type(String(repeating: "7", count: 33) + "\n")
            #expect(process.readUntil("characters): ").contains("This key's PIN has at most 32 bytes. Try again."))
            process.type(pin + "\n")
            _ = process.readUntil("Repeat the new PIN: ")
            process.type(pin + "\n")
            #expect(process.wait() == 0, "\(process.standardError)")
            #expect(try machine.login(pin: pin).status == 0)

            // From standard input the one PIN is bad input, refused before a key is made.
            let script = Machine(tpm: tpm)
            defer { script.home.remove() }
            let refused = try script.register(server, user: "ulf", pin: String(repeating: "7", count: 33))
            #expect(refused.status == 64)
            #expect(
                refused.errorLines == [
                    "keyauth: This key's PIN has at most 32 bytes. Nothing was registered. (see `keyauth register --help`)"
                ],
                "\(refused.standardError)")
            #expect(script.accounts.accountNames().isEmpty)
        }
    }

    @Test("pin change with the TPM stopped exits 69 naming its TCTI and changes nothing")
    func pinChangeWithoutTPM() throws {
        try withTPMAccount(user: "sven") { tpm, _, machine in
            let directory = try machine.keyDirectory()
            let before = try AccountFiles(directory)
            tpm.stop()
            let change = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "\(pin)\n9753\n")
            #expect(change.status == 69)
            expectOneErrorLine(change)
            #expect(change.standardError.contains("the TPM at \(tpm.tcti) is unavailable"))
            #expect(try AccountFiles(directory) == before)
            try tpm.start()
            #expect(try machine.login(pin: pin).status == 0)
        }
    }

    @Test("reset deletes the blob and leaves nothing in the TPM; --local-only works with the TPM gone")
    func reset() throws {
        try withTPMAccount(user: "frank") { tpm, server, machine in
            let directory = try machine.keyDirectory()
            let reset = try machine.run(["reset", "--pin-stdin"], standardInput: pin + "\n")
            #expect(reset.status == 0, "\(reset.standardError)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/device-key.tpm"))
            #expect(!FileManager.default.fileExists(atPath: directory))
            for handles in ["handles-transient", "handles-persistent"] {
                let listed = try ExternalCommand.run(["tpm2_getcap", "-T", tpm.tcti, handles])
                #expect(listed.status == 0, "\(listed.errorOutput)")
                #expect(listed.output.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "\(handles)")
            }

            // Another user: one whose devices were all revoked comes back only with a code.
            let again = try machine.register(server, user: "grace", pin: pin)
            #expect(again.status == 0, "\(again.standardError)")
            let name = try machine.accounts.resolve(nil)
            try machine.accounts.credentials.deleteToken(account: name)
            tpm.stop()
            // Revoking needs a login, and the login needs the TPM.
            #expect(try machine.run(["reset", "--pin-stdin"], standardInput: pin + "\n").status == 69)
            #expect(try machine.run(["reset", "--local-only"]).status == 0)
            #expect(machine.accounts.accountNames().isEmpty)
        }
    }

    @Test("auto picks the TPM when one answers and a key file when KEYAUTH_TPM_TCTI points nowhere")
    func automaticChoice() throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try withServer { server in
            let withTPM = Machine(tpm: tpm)
            let withoutTPM = Machine()
            defer {
                withTPM.home.remove()
                withoutTPM.home.remove()
            }
            let inTPM = try withTPM.register(server, user: "grace", extra: ["--key-store", "auto"])
            #expect(inTPM.status == 0, "\(inTPM.standardError)")
            #expect(inTPM.standardOutput.hasPrefix("Key store: TPM (IBM)\n"))
            #expect(try statusEntry(withTPM)["key_store"]?.stringValue == "tpm")
            // --presence none: an empty authorization value, and logins need no PIN.
            let blob = try Data(contentsOf: URL(fileURLWithPath: try withTPM.keyDirectory() + "/device-key.tpm"))
            #expect(try !TPMKey(pemRepresentation: Array(blob)).requiresPIN)
            #expect(try withTPM.run(["login"]).status == 0)

            let inFile = try withoutTPM.register(server, user: "heidi")
            #expect(inFile.status == 0, "\(inFile.standardError)")
            #expect(
                inFile.standardOutput.hasPrefix(
                    "Key store: file (the TPM at \(SoftwareTPM.absentTCTI) is unavailable"))
            let entry = try statusEntry(withoutTPM)
            #expect(entry["key_store"]?.stringValue == "file")
            #expect(entry["tpm_available"] == .null)
            let directory = try withoutTPM.keyDirectory()
            #expect(FileManager.default.fileExists(atPath: directory + "/device-key.pem"))
            #expect(!FileManager.default.fileExists(atPath: directory + "/device-key.tpm"))
            #expect(try withoutTPM.run(["login"]).status == 0)

            // Asked for explicitly: a TPM that is not there is exit 69, and leaves nothing behind.
            let forced = try withoutTPM.run(
                ["register", "--server", server.url, "--user", "ivan", "--key-store", "tpm", "--presence", "none"])
            #expect(forced.status == 69)
            expectOneErrorLine(forced)
            #expect(forced.standardError.contains(SoftwareTPM.absentTCTI))
            #expect(withoutTPM.accounts.accountNames().count == 1)
            // And a key file when asked for, though a TPM answers.
            let file = try withTPM.register(server, user: "judy", extra: ["--key-store", "file", "--account", "judy"])
            #expect(file.status == 0, "\(file.standardError)")
            #expect(file.standardOutput.hasPrefix("Key store: file\n"))
            #expect(try withTPM.accounts.keyPairStore(for: "judy").storedKind == .file)
        }
    }

    @Test("a TPM key's PIN may have 4 characters, a key file's needs 6; --bits the TPM cannot make is a usage error")
    func pinAndSizeRules() throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try withServer { server in
            let machine = Machine(tpm: tpm)
            defer { machine.home.remove() }
            let tooBig = try machine.run(
                ["register", "--server", server.url, "--user", "kim", "--bits", "4096", "--presence", "none"])
            #expect(tooBig.status == 64)
            expectOneErrorLine(tooBig)
            #expect(tooBig.standardError.contains("2048 or 3072"))
            let shortForFile = try machine.register(server, user: "kim", extra: ["--key-store", "file"], pin: pin)
            #expect(shortForFile.status == 64)
            #expect(shortForFile.standardError.contains("at least 6 characters"))
            #expect(machine.accounts.accountNames().isEmpty)
            let shortForTPM = try machine.register(server, user: "kim", pin: pin)
            #expect(shortForTPM.status == 0, "\(shortForTPM.standardError)")
        }
    }
}
