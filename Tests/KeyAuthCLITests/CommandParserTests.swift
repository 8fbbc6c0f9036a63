import KeyAuth
import KeyAuthCLI
import Testing

private let sampleKeyID = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"

@Suite("Command-line parsing")
struct CommandParserTests {
    @Test("register takes every flag of the contract, in either value form")
    func registerFlags() throws {
        let command = try CommandParser.parse([
            "register", "--server", "http://127.0.0.1:8088/", "--user=alice", "--name", "my laptop", "--bits", "4096",
            "--presence", "pam", "--pam-service", "login", "--enrollment-code", "CODE", "--account", "work",
            "--no-wait", "--pin-stdin",
        ])
        var expected = RegisterOptions(serverURL: "http://127.0.0.1:8088", user: "alice")
        expected.deviceName = "my laptop"
        expected.bits = 4096
        expected.presence = .pam
        expected.pamService = "login"
        expected.enrollmentCode = "CODE"
        expected.account = "work"
        expected.noWait = true
        expected.pinFromStandardInput = true
        #expect(command == .register(expected))
    }

    @Test("--enrollment-code - reads the code from standard input, and --insecure-http is kept only off loopback")
    func enrollmentCodeFromStandardInput() throws {
        let command = try CommandParser.parse([
            "register", "--server", "http://auth.example:8088", "--user", "alice", "--enrollment-code", "-",
            "--insecure-http",
        ])
        var expected = RegisterOptions(serverURL: "http://auth.example:8088", user: "alice")
        expected.enrollmentCodeFromStandardInput = true
        expected.insecureHTTP = true
        #expect(command == .register(expected))
        guard
            case .register(let loopback) = try CommandParser.parse([
                "register", "--server", "http://[::1]:8088", "--user", "alice", "--insecure-http",
            ])
        else { throw KeyAuthError(.usage, "not a register command") }
        #expect(!loopback.insecureHTTP)
        #expect(loopback.enrollmentCode == nil && !loopback.enrollmentCodeFromStandardInput)
    }

    @Test("--recovery-code takes a code or - for standard input, never with --enrollment-code; recovery-codes parses")
    func recoveryCodes() throws {
        var expected = RegisterOptions(serverURL: "https://auth.example", user: "alice")
        expected.recoveryCode = "7K3M-9QX0-ABCD-EFGH-JK1M"
        #expect(
            try CommandParser.parse([
                "register", "--server", "https://auth.example", "--user", "alice", "--recovery-code",
                "7K3M-9QX0-ABCD-EFGH-JK1M",
            ]) == .register(expected))
        expected.recoveryCode = nil
        expected.recoveryCodeFromStandardInput = true
        #expect(
            try CommandParser.parse([
                "register", "--server", "https://auth.example", "--user", "alice", "--recovery-code", "-",
            ]) == .register(expected))
        #expect(throws: KeyAuthError.self) {
            try CommandParser.parse([
                "register", "--server", "https://auth.example", "--user", "alice", "--recovery-code", "-",
                "--enrollment-code", "X",
            ])
        }
        var options = RecoveryCodesOptions(account: "work")
        options.pinFromStandardInput = true
        #expect(
            try CommandParser.parse(["recovery-codes", "--account", "work", "--pin-stdin"]) == .recoveryCodes(options))
        #expect(throws: KeyAuthError.self) { try CommandParser.parse(["recovery-codes", "extra"]) }
        #expect(throws: KeyAuthError.self) { try CommandParser.parse(["recovery-codes", "--json"]) }
    }

    @Test("attest takes --account and --pin-stdin, and nothing else")
    func attest() throws {
        var options = AttestOptions(account: "work")
        options.pinFromStandardInput = true
        #expect(try CommandParser.parse(["attest", "--account", "work", "--pin-stdin"]) == .attest(options))
        #expect(try CommandParser.parse(["attest"]) == .attest(AttestOptions()))
        #expect(try CommandParser.parse(["attest", "--help"]) == .help(topic: .attest))
        for arguments in [["attest", "extra"], ["attest", "--json"], ["attest", "--account"]] {
            let error = try #require(throws: KeyAuthError.self) { try CommandParser.parse(arguments) }
            #expect(error.code == .usage, "\(arguments)")
        }
    }

    @Test("register defaults to the key store's size, the automatic key store and a PIN")
    func registerDefaults() throws {
        let command = try CommandParser.parse(["register", "--server", "https://auth.example", "--user", "bob"])
        guard case .register(let options) = command else {
            Issue.record("not a register command")
            return
        }
        #expect(options.bits == nil)
        #expect(options.keyStore == nil)
        #expect(options.presence == .pin)
        #expect(options.pamService == "keyauth")
        #expect(options.deviceName == nil)
        #expect(!options.noWait)
    }

    @Test("requests, approve [ID] and deny ID parse; an ID may start with a dash; deny needs one; a bad ID is usage")
    func signInCommands() throws {
        var watch = RequestsOptions(account: "a")
        watch.watch = true
        #expect(try CommandParser.parse(["requests", "--watch", "--account", "a"]) == .requests(watch))
        #expect(try CommandParser.parse(["approve"]) == .answer(AnswerOptions(decision: .approve, requestID: nil)))
        let id = "-" + String(repeating: "A", count: 42)
        var approve = AnswerOptions(decision: .approve, requestID: id)
        approve.pinFromStandardInput = true
        #expect(try CommandParser.parse(["approve", id, "--pin-stdin"]) == .answer(approve))
        #expect(try CommandParser.parse(["deny", id]) == .answer(AnswerOptions(decision: .deny, requestID: id)))
        for arguments in [
            ["deny"], ["approve", "short"], ["deny", "a/b"], ["requests", "extra"], ["approve", id, id],
        ] {
            #expect(throws: KeyAuthError.self, "\(arguments)") { try CommandParser.parse(arguments) }
            #expect((try? CommandParser.parse(arguments)) == nil)
        }
    }

    @Test("the other commands take their flags")
    func otherCommands() throws {
        var login = LoginOptions(account: "a")
        login.pinFromStandardInput = true
        #expect(try CommandParser.parse(["login", "--account", "a", "--pin-stdin"]) == .login(login))
        #expect(try CommandParser.parse(["token"]) == .token(TokenOptions()))
        var status = StatusOptions()
        status.json = true
        #expect(try CommandParser.parse(["status", "--json"]) == .status(status))
        var pubkey = PubkeyOptions()
        pubkey.jwk = true
        #expect(try CommandParser.parse(["pubkey", "--jwk"]) == .pubkey(pubkey))
        var reset = ResetOptions(account: "x")
        reset.localOnly = true
        #expect(try CommandParser.parse(["reset", "--local-only", "--account", "x"]) == .reset(reset))
        #expect(try CommandParser.parse(["devices"]) == .devices(DevicesOptions()))
        #expect(try CommandParser.parse(["devices", "list"]) == .devices(DevicesOptions()))
        #expect(
            try CommandParser.parse(["devices", "approve", sampleKeyID])
                == .devices(DevicesOptions(action: .approve(keyID: sampleKeyID))))
        #expect(
            try CommandParser.parse(["devices", "revoke", sampleKeyID])
                == .devices(DevicesOptions(action: .revoke(keyID: sampleKeyID))))
    }

    @Test("proof takes METHOD, URL, --account, --pin-stdin and --nonce")
    func proofOptions() throws {
        var expected = ProofOptions(method: "DELETE", url: "https://api.example/orders/7?force=1")
        expected.account = "work"
        expected.pinFromStandardInput = true
        expected.nonce = "n0nce"
        #expect(
            try CommandParser.parse([
                "proof", "DELETE", "https://api.example/orders/7?force=1", "--account", "work", "--pin-stdin",
                "--nonce=n0nce",
            ]) == .proof(expected))
        #expect(
            try CommandParser.parse(["proof", "GET", "http://127.0.0.1:8088/v1/devices"])
                == .proof(ProofOptions(method: "GET", url: "http://127.0.0.1:8088/v1/devices")))
        #expect(try CommandParser.parse(["proof", "--help"]) == .help(topic: .proof))
    }

    @Test("approve takes a short code of 8 characters or more, or nothing to choose among the pending ones")
    func shortCodes() throws {
        #expect(
            try CommandParser.parse(["devices", "approve", "K1P-mIKd"])
                == .devices(DevicesOptions(action: .approve(keyID: "K1P-mIKd"))))
        #expect(try CommandParser.parse(["devices", "approve"]) == .devices(DevicesOptions(action: .choosePending)))
        #expect(throws: KeyAuthError.self) { try CommandParser.parse(["devices", "revoke", "K1P-mIK"]) }
    }

    @Test("a KID that starts with dashes is still a KID after approve and revoke")
    func dashedKeyID() throws {
        let dashed = "-jE4jLmqxvpkkRwbgfnJol-CY9itkrEubq1JQUAwJlY"
        let doubleDashed = "--E4jLmqxvpkkRwbgfnJol-CY9itkrEubq1JQUAwJlY"
        #expect(
            try CommandParser.parse(["devices", "approve", dashed])
                == .devices(DevicesOptions(action: .approve(keyID: dashed))))
        var options = DevicesOptions(action: .revoke(keyID: doubleDashed))
        options.account = "work"
        #expect(try CommandParser.parse(["devices", "--account", "work", "revoke", doubleDashed]) == .devices(options))
        #expect(throws: KeyAuthError.self) { try CommandParser.parse(["devices", "approve", "--json"]) }
    }

    @Test("help and version have their usual spellings")
    func helpAndVersion() throws {
        #expect(try CommandParser.parse(["--help"]) == .help(topic: nil))
        #expect(try CommandParser.parse(["-h"]) == .help(topic: nil))
        #expect(try CommandParser.parse(["help", "devices"]) == .help(topic: .devices))
        #expect(try CommandParser.parse(["register", "--help"]) == .help(topic: .register))
        #expect(try CommandParser.parse(["devices", "approve", "-h"]) == .help(topic: .devices))
        #expect(try CommandParser.parse(["--version"]) == .version)
    }

    @Test(
        "malformed command lines are usage errors",
        arguments: [
            [], ["frobnicate"], ["--frob"], ["login", "--bogus"], ["login", "-x"], ["login", "extra"],
            ["register", "--user", "alice"], ["register", "--server", "http://h"], ["register", "--server"],
            ["register", "--server", "http://h", "--user"],
            ["register", "--server", "http://h", "--user", "a", "--user", "b"],
            ["register", "--server", "http://h", "--user", "a", "--bits", "1024"],
            ["register", "--server", "http://h", "--user", "a", "--presence", "touchid"],
            ["register", "--server", "http://h", "--user", "a", "--pam-service", "x"],
            ["register", "--server", "ftp://h", "--user", "a"], ["register", "--server", "http://h", "--user", "a b"],
            ["register", "--server", "http://h", "--user", "a", "--account", "../x"], ["status", "--json=yes"],
            ["devices", "approve", "--json"], ["devices", "approve", "short"], ["devices", "revoke"],
            ["devices", "burn"], ["help", "nothing"],
            ["--version", "extra"],
            ["proof"], ["proof", "GET"], ["proof", "get", "https://api.example/x"],
            ["proof", "GET", "/x"], ["proof", "GET", "ftp://api.example/x"], ["proof", "GET", "https://a/x", "extra"],
            ["proof", "GET", "https://a/x", "--nonce"],
            // The server's device-name rule: no whitespace at either end, no format characters.
            ["register", "--server", "http://h", "--user", "a", "--name", "laptop "],
            ["register", "--server", "http://h", "--user", "a", "--name", "lap\u{200E}top"],
        ])
    func usageErrors(arguments: [String]) {
        let error = #expect(throws: KeyAuthError.self) { try CommandParser.parse(arguments) }
        #expect(error?.code == .usage)
        #expect(error.map { ExitCode(for: $0) } == .usage)
        #expect(error?.message.contains("--help") == true)
        #expect(error?.message.contains("\n") == false)
    }

    @Test("exit statuses follow the contract")
    func exitStatuses() {
        func status(_ code: KeyAuthError.Code, oauth: OAuthError.Code? = nil) -> ExitCode {
            let underlying = oauth.map { OAuthError(error: $0, errorDescription: nil, statusCode: 400) }
            return ExitCode(for: KeyAuthError(code, "x", underlying: underlying))
        }
        #expect(status(.keyCorrupt) == .dataError)
        #expect(status(.keyUnprotected) == .dataError)
        #expect(status(.accountCorrupt) == .dataError)
        #expect(status(.transportFailed) == .unavailable)
        #expect(status(.wrongPIN) == .noPermission)
        // An encrypted key where none was expected: the library says so now, the status stays.
        #expect(status(.keyEncrypted) == .noPermission)
        #expect(status(.lockedOut) == .noPermission)
        #expect(status(.presenceDenied) == .noPermission)
        #expect(status(.serverRejected, oauth: .invalidGrant) == .noPermission)
        #expect(status(.serverRejected, oauth: .accessDenied) == .noPermission)
        #expect(status(.serverRejected, oauth: .temporarilyUnavailable) == .unavailable)
        #expect(status(.serverRejected, oauth: .invalidRequest) == .failure)
        #expect(status(.keyExists) == .failure)
        #expect(status(.accountNotFound) == .failure)
    }

    @Test(
        "a mistyped option is refused with the nearest option of the command, as a mistyped command is",
        arguments: [
            (["register", "--sever", "http://127.0.0.1:8080"], "--sever", "register", "; did you mean --server?"),
            (["register", "--sever=http://127.0.0.1:8080"], "--sever", "register", "; did you mean --server?"),
            (["login", "--pin-stdn"], "--pin-stdn", "login", "; did you mean --pin-stdin?"),
            (["reset", "--local"], "--local", "reset", "; did you mean --local-only?"),
            (["status", "--frobnicate"], "--frobnicate", "status", ""),
        ])
    func unknownOptionSuggestion(_ arguments: [String], _ option: String, _ command: String, _ suggestion: String) {
        let error = #expect(throws: KeyAuthError.self) { try CommandParser.parse(arguments) }
        #expect(error?.code == .usage)
        #expect(
            error?.message
                == "unknown option \(option) for `keyauth \(command)`\(suggestion) (see `keyauth \(command) --help`)")
    }
}
