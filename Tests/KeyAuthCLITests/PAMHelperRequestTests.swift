import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

@Suite("The pam_keyauth request and the user mapping")
struct PAMHelperRequestTests {
    @Test("a request with every field parses, and optional fields may be left out")
    func parsesRequests() throws {
        let full = try PAMHelperRequest(
            text: "keyauth-pam 1\nuser alice\nservice sudo\nserver https://k.example\nhome ~/k\n"
                + "users /etc/u\ntcti swtpm:port=1\n\n")
        #expect(full.user == "alice")
        #expect(full.service == "sudo")
        #expect(full.server == "https://k.example")
        #expect(full.home == "~/k")
        #expect(full.users == "/etc/u")
        #expect(full.tcti == "swtpm:port=1")
        let short = try PAMHelperRequest(text: "keyauth-pam 1\nuser bob\nserver https://k.example\n\n")
        #expect(short.home == nil)
        #expect(short.service == "unknown")
    }

    @Test("a request of another version, with an unknown or repeated field, or without a server is refused")
    func refusesBrokenRequests() {
        for text in [
            "keyauth-pam 2\nuser a\nserver s\n\n", "keyauth-pam 1\nuser a\nserver s\nshell /bin/sh\n\n",
            "keyauth-pam 1\nuser a\nuser b\nserver s\n\n", "keyauth-pam 1\nuser a\n\n",
            "keyauth-pam 1\nserver s\n\n", "keyauth-pam 1\nuser\nserver s\n\n",
        ] {
            #expect(throws: KeyAuthError.self) { try PAMHelperRequest(text: text) }
            #expect((try? PAMHelperRequest(text: text)) == nil, "\(text)")
        }
    }

    @Test("a plain http server= is refused unless root's module arguments say insecure_http")
    func plainHTTPNeedsTheModuleFlag() throws {
        let plain = "keyauth-pam 1\nuser alice\nserver http://127.0.0.1:8080\n"
        #expect(throws: KeyAuthError.self) { try PAMHelperRequest(text: plain + "\n") }
        #expect(throws: KeyAuthError.self) { try PAMHelperRequest(text: plain + "insecure-http no\n\n") }
        let allowed = try PAMHelperRequest(text: plain + "insecure-http yes\n\n")
        #expect(allowed.allowsInsecureHTTP)
        // Only to this host: across a network anyone on the path would answer for the server.
        for server in ["http://10.0.0.5:8080", "http://keyauth.example", "http://127.0.0.1.example:80", "http:///x"] {
            let text = "keyauth-pam 1\nuser alice\nserver \(server)\ninsecure-http yes\n\n"
            #expect(throws: KeyAuthError.self, "\(server)") { try PAMHelperRequest(text: text) }
        }
        for server in ["http://localhost:8080", "http://[::1]:8080", "HTTP://127.0.0.2"] {
            let text = "keyauth-pam 1\nuser alice\nserver \(server)\ninsecure-http yes\n\n"
            #expect(try PAMHelperRequest(text: text).allowsInsecureHTTP, "\(server)")
        }
        #expect(
            try !PAMHelperRequest(text: "keyauth-pam 1\nuser alice\nserver HTTPS://k.example\n\n").allowsInsecureHTTP)
    }

    @Test("the mapping file maps a listed user, and everyone else to their own name")
    func mapsUsers() throws {
        let text = "# comment\nalice alice.smith\nbob bob bob@k.example  # trailing\n"
        #expect(try HostUserMapping.entry(for: "alice", text: text, file: "f").keyauthUser == "alice.smith")
        let bob = try HostUserMapping.entry(for: "bob", text: text, file: "f")
        #expect(bob == HostUserMapping.Entry(keyauthUser: "bob", account: "bob@k.example"))
        #expect(try HostUserMapping.entry(for: "carol", text: text, file: "f").keyauthUser == "carol")
        #expect(throws: KeyAuthError.self) { try HostUserMapping.entry(for: "dan", text: "dan\n", file: "f") }
    }

    @Test("a user name the password database spells otherwise is refused, not mapped apart")
    func spellings() throws {
        #expect(PAMHelper.spellingRefusal(requested: "alice", database: "alice") == nil)
        for requested in ["ALICE", "Alice", "alic\u{65}\u{301}"] {
            let refusal = try #require(PAMHelper.spellingRefusal(requested: requested, database: "alice"))
            guard case .refused(let reason) = refusal else {
                Issue.record("\(refusal)")
                continue
            }
            #expect(reason.contains("spelled alice"))
        }
        // The database's own spelling of root, as getpwnam gives it back.
        #expect(LinuxUser(name: "root")?.name == "root")
    }

    @Test("keyauth is the helper only when started under the helper's name")
    func helperName() {
        #expect(PAMHelper.isProgramName("/usr/libexec/keyauth/keyauth-pam-helper"))
        #expect(PAMHelper.isProgramName("keyauth-pam-helper"))
        #expect(!PAMHelper.isProgramName("/usr/bin/keyauth"))
        #expect(!PAMHelper.isProgramName("/tmp/not-keyauth-pam-helper"))
        #expect(!PAMHelper.isProgramName(nil))
    }

    @Test("answers are one line, whatever the reason holds")
    func answersAreOneLine() {
        let line = PAMHelper.Answer.refused("bad\nline\u{1B}[31m").line
        #expect(line == "refused bad line [31m")
        // C1 CSI, DEL and a right-to-left override: sudo's and login's terminals filter nothing.
        #expect(PAMHelper.Answer.refused("a\u{9B}2J\u{7F}\u{202E}b").line == "refused a 2J  b")
        #expect(PAMHelper.Answer.ok("account a").line == "ok account a")
        // The module counts bytes (1023 at most): 900 characters of another script are not 900.
        let long = PAMHelper.Answer.refused(String(repeating: "\u{1F512}", count: 600)).line
        #expect(long.utf8.count <= PAMHelper.Answer.maximumLineBytes)
        #expect(long.hasPrefix("refused \u{1F512}") && long.unicodeScalars.last == "\u{1F512}")
    }
}

@Suite("pam_keyauth's account: what root checked is what logs in")
struct PAMHelperAccountTests {
    @Test("the user mapping matches a Linux user byte for byte, not a canonically equivalent spelling")
    func mappingIsByteExact() throws {
        let text = "jos\u{E9} alice\n"
        #expect(try HostUserMapping.entry(for: "jos\u{E9}", text: text, file: "f").keyauthUser == "alice")
        // The decomposed spelling is another Linux account: its own same-name default.
        #expect(try HostUserMapping.entry(for: "jose\u{301}", text: text, file: "f").keyauthUser == "jose\u{301}")
    }

    @Test("a session opened from the checked record uses its server, whatever the file says by then")
    func sessionUsesTheCheckedRecord() throws {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let name = "alice@keyauth.example"
        let checked = KeyAuthAccount(
            name: name, serverURL: "https://keyauth.example", issuer: "https://keyauth.example", user: "alice",
            deviceName: "laptop", presence: .pin, status: .active)
        try harness.accounts.save(checked)
        _ = try harness.accounts.keyPairStore(for: name).createKey(bits: 2048)
        // What something running as the user renames in after root's check: its own server.
        var swapped = checked
        swapped.serverURL = "http://127.0.0.1:9"
        swapped.issuer = "http://127.0.0.1:9"
        swapped.presence = .none
        try harness.accounts.save(swapped)

        let io = CommandIO(
            writeOutput: { _ in }, writeError: { _ in }, standardInput: -1, environment: harness.environment,
            isErrorTerminal: false, terminalReader: FixedSecretReader(answers: [String]()), hostName: "test-host")
        let session = try AccountSession.open(
            context: CommandContext(io: io), checked: checked, pinFromStandardInput: false, waitForApproval: false)
        #expect(session.client.serverURL == "https://keyauth.example")
        #expect(session.account.presence == PresenceKind.pin)
        // The name alone reads the file again: the other path, which the helper no longer takes.
        let reread = try AccountSession.open(
            context: CommandContext(io: io), account: name, pinFromStandardInput: false, waitForApproval: false)
        #expect(reread.client.serverURL == "http://127.0.0.1:9")
    }
    @Test("an account file that says PIN over a key made without one is refused; a key encrypted with its PIN is not")
    func keyMustNeedThePIN() throws {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        // What something running as the user writes over an account registered with no PIN.
        let edited = KeyAuthAccount(
            name: "open@keyauth.example", serverURL: "https://keyauth.example", issuer: "https://keyauth.example",
            user: "alice", deviceName: "laptop", presence: .pin, status: .active)
        try harness.accounts.save(edited)
        _ = try harness.accounts.keyPairStore(for: edited.name).createKey(bits: 2048)
        let refusal = PAMHelper.keyWithoutPINRefusal(edited, in: harness.accounts)
        #expect(refusal?.contains("opens without a PIN") == true)

        var guarded = edited
        guarded.name = "guarded@keyauth.example"
        try harness.accounts.save(guarded)
        _ = try harness.accounts.keyPairStore(for: guarded.name).createKey(bits: 2048, pin: SecretBytes(utf8: "2468"))
        #expect(PAMHelper.keyWithoutPINRefusal(guarded, in: harness.accounts) == nil)
    }
}

@Suite("pam_keyauth and a TPM's lockout")
struct PAMHelperTPMLockoutTests {
    private func info(counter: Int, locked: Bool = false, interval: Int = 1000, tries: Int = 3) -> TPMInfo {
        TPMInfo(
            manufacturer: "IBM", vendor: "SW   TPM", lockoutCounter: counter, maximumTries: tries,
            lockoutInterval: interval, lockoutRecovery: 1000, isLockedOut: locked, rsaKeySizes: [2048])
    }

    @Test("nothing counted asks plainly; counted wrong PINs are in the prompt; a locked TPM refuses with the wait")
    func states() {
        #expect(PAMHelper.tpmLockoutState(nil) == .ask(note: ""))
        #expect(PAMHelper.tpmLockoutState(info(counter: 0)) == .ask(note: ""))
        #expect(PAMHelper.tpmLockoutState(info(counter: 1)) == .ask(note: " (the TPM locks after 2 more wrong PINs)"))
        #expect(PAMHelper.tpmLockoutState(info(counter: 2)) == .ask(note: " (the TPM locks after 1 more wrong PIN)"))
        #expect(
            PAMHelper.tpmLockoutState(info(counter: 3, locked: true))
                == .locked("the TPM is locked after too many wrong PINs and refuses its keys for up to 1000 seconds"))
        #expect(
            PAMHelper.tpmLockoutState(info(counter: 3, locked: true, interval: 0))
                == .locked(
                    "the TPM is locked after too many wrong PINs and refuses its keys until its owner resets the lockout"
                ))
    }

    @Test("host logins leave a TPM's last quarter of tries to the keyauth command, stopping a stranger's PINs")
    func reserve() {
        #expect(
            PAMHelper.tpmLockoutState(info(counter: 23, tries: 32))
                == .ask(note: " (the TPM locks after 9 more wrong PINs)"))
        #expect(
            PAMHelper.tpmLockoutState(info(counter: 24, tries: 32))
                == .locked(
                    "the TPM takes only 8 more wrong PINs before it locks every key on this machine, and host logins "
                        + "leave those to keyauth login so that no one at a login prompt can lock it; it forgets one "
                        + "wrong PIN every 1000 seconds"))
        #expect(
            PAMHelper.tpmLockoutState(info(counter: 31, interval: 0, tries: 32))
                == .locked(
                    "the TPM takes only 1 more wrong PIN before it locks every key on this machine, and host logins "
                        + "leave those to keyauth login so that no one at a login prompt can lock it; it forgets none "
                        + "until its owner resets the lockout"))
        #expect(PAMHelper.reservedTries(info(counter: 0, tries: 32)) == 8)
        #expect(PAMHelper.reservedTries(info(counter: 0, tries: 3)) == 0)
        // The wait for the lock on the TPM's tries leaves half the module's timeout to the rest.
        #expect(PAMHelper.tpmTryLockWait(answerTimeoutSeconds: 10) == .seconds(5))
        #expect(PAMHelper.tpmTryLockWait(answerTimeoutSeconds: 120) == .seconds(5))
        #expect(PAMHelper.tpmTryLockWait(answerTimeoutSeconds: 3) == .milliseconds(1500))
    }
}
