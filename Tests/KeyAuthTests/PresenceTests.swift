import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// A directory under the system's temporary directory, removed when the value is released.
private final class TemporaryDirectory {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/keyauth-presence-XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
        }
        guard let created else {
            throw KeyAuthError(.storageFailed, "mkdtemp failed")
        }
        path = created
    }

    func write(_ name: String, _ contents: String) throws {
        try contents.write(toFile: "\(path)/\(name)", atomically: true, encoding: .utf8)
    }

    func entries() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// A clock that only moves when a test moves it.
private final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var seconds: TimeInterval = 1_700_000_000

    func advance(by interval: TimeInterval) {
        lock.withLock { seconds += interval }
    }

    var now: @Sendable () -> Date {
        { [self] in lock.withLock { Date(timeIntervalSince1970: seconds) } }
    }
}

/// Stands in for the key store: accepts only `2468`, as decrypting the key with it would.
private func decrypt(_ pin: SecretBytes) throws(KeyAuthError) -> Int {
    guard pin.constantTimeEquals(SecretBytes(utf8: "2468")) else {
        throw KeyAuthError(.wrongPIN, "wrong PIN")
    }
    return 42
}

private func text(_ secret: SecretBytes) -> String {
    secret.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
}

@Suite("Presence PIN check")
struct PresencePINTests {
    private let directory: TemporaryDirectory
    private let clock = ManualClock()
    private var attemptsFile: String { "\(directory.path)/pin-attempts" }

    init() throws {
        directory = try TemporaryDirectory()
    }

    private func check(_ answers: [String]) -> (PINPresence, FixedSecretReader) {
        let reader = FixedSecretReader(answers: answers)
        return (PINPresence(reader: reader, attemptsFile: attemptsFile, now: clock.now), reader)
    }

    private func failTimes(_ count: Int) async {
        let (presence, _) = check(Array(repeating: "0000", count: count))
        for _ in 0..<count {
            await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "test", decrypt) }
        }
    }

    @Test("the right PIN reaches the body and shows the reason in the prompt")
    func rightPIN() async throws {
        let (presence, reader) = check(["2468"])
        let value = try await presence.withPIN(reason: "Sign in to example.com", decrypt)
        #expect(value == 42)
        #expect(reader.requests == [.init(prompt: "Sign in to example.com\nPIN: ", echo: false)])
        #expect(presence.kind == .pin)
        #expect(presence.isAvailable())
    }

    @Test("a wrong PIN fails with wrongPIN and says how many attempts are left")
    func wrongPIN() async throws {
        let (presence, _) = check(["1111"])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(error?.code == .wrongPIN)
        #expect(error?.retryAfter == nil)
        #expect(error?.message.contains("4 attempts left") == true)
        #expect(error?.message.contains("1111") == false)
    }

    @Test("the sixth attempt after five wrong PINs is locked out without asking")
    func lockout() async throws {
        let (presence, reader) = check(Array(repeating: "1111", count: 4) + ["0000", "2468"])
        for attempt in 1...5 {
            let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
            #expect(error?.code == .wrongPIN)
            #expect((error?.retryAfter != nil) == (attempt == 5))
        }
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(error?.code == .lockedOut)
        #expect(error?.retryAfter == 30)
        #expect(error?.message.contains("30 seconds") == true)
        #expect(reader.requests.count == 5)
    }

    @Test("a lockout holds for a new instance over the same file, as for another process")
    func lockoutPersists() async throws {
        await failTimes(5)
        clock.advance(by: 10)
        let (fresh, reader) = check(["2468"])
        let error = await #expect(throws: KeyAuthError.self) { try await fresh.withPIN(reason: "", decrypt) }
        #expect(error?.code == .lockedOut)
        #expect(error?.retryAfter == 20)
        #expect(reader.requests.isEmpty)
        let presence = await #expect(throws: KeyAuthError.self) { try await fresh.verifyPresence(reason: "") }
        #expect(presence?.code == .lockedOut)
        #expect(reader.requests.isEmpty)
    }

    @Test("the delay passes with the clock, doubles on the next failure, and a success resets it")
    func delayGrowsAndResets() async throws {
        await failTimes(5)
        clock.advance(by: 30)
        let (presence, reader) = check(["1111", "2468", "1111"])
        let sixth = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(sixth?.code == .wrongPIN)
        #expect(sixth?.retryAfter == 60)

        clock.advance(by: 59)
        let locked = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(locked?.code == .lockedOut)
        #expect(locked?.retryAfter == 1)

        clock.advance(by: 1)
        #expect(try await presence.withPIN(reason: "", decrypt) == 42)
        let afterReset = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(afterReset?.code == .wrongPIN)
        #expect(afterReset?.retryAfter == nil)
        #expect(reader.requests.count == 3)
    }

    @Test("the delay doubles per failure up to one hour")
    func delaySchedule() {
        #expect(PINPresence.delay(afterFailures: 4) == 0)
        #expect(PINPresence.delay(afterFailures: 5) == 30)
        #expect(PINPresence.delay(afterFailures: 6) == 60)
        #expect(PINPresence.delay(afterFailures: 11) == 1920)
        #expect(PINPresence.delay(afterFailures: 12) == 3600)
        #expect(PINPresence.delay(afterFailures: Int.max) == 3600)
    }

    @Test("a clock set backwards waits one delay at most")
    func clockBackwards() {
        let state = AttemptState(failures: 5, lastFailure: 1000)
        #expect(PINPresence.retryAfter(state, now: 10) == 30)
        #expect(PINPresence.retryAfter(state, now: 1030) == nil)
    }

    @Test("the attempts file has mode 0600 and no temporary file is left behind")
    func stateFileMode() async throws {
        await failTimes(1)
        var info = stat()
        #expect(stat(attemptsFile, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(try directory.entries() == ["pin-attempts", "pin-attempts.lock"])
        let contents = try String(contentsOfFile: attemptsFile, encoding: .utf8)
        #expect(contents.contains("\"failures\":1"))
    }

    @Test("errors other than a wrong PIN do not count towards the lockout")
    func otherErrorsDoNotCount() async throws {
        let (presence, _) = check(Array(repeating: "2468", count: 7))
        for _ in 1...6 {
            let error = await #expect(throws: KeyAuthError.self) {
                try await presence.withPIN(reason: "") { (_) throws(KeyAuthError) in
                    throw KeyAuthError(.keyCorrupt, "damaged")
                }
            }
            #expect(error?.code == .keyCorrupt)
        }
        #expect(try await presence.withPIN(reason: "", decrypt) == 42)
    }

    @Test("a damaged attempts file fails closed with storageFailed")
    func damagedFile() async throws {
        try directory.write("pin-attempts", "not json")
        let (presence, reader) = check(["2468"])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(error?.code == .storageFailed)
        #expect(reader.requests.isEmpty)
    }

    @Test("an empty PIN is denied without counting as a failure")
    func emptyPIN() async throws {
        let (presence, _) = check(["", ""])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(error?.code == .presenceDenied)
        let verify = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(verify?.code == .presenceDenied)
        #expect(!FileManager.default.fileExists(atPath: attemptsFile))
    }

    @Test("verifyPresence accepts any non-empty PIN, as only decryption can check it")
    func verifyPresenceReadsOnly() async throws {
        let (presence, reader) = check(["9999"])
        try await presence.verifyPresence(reason: "Unlock")
        #expect(reader.requests.count == 1)
    }

    @Test("a new PIN is asked twice and returned when both entries match")
    func newPIN() async throws {
        let (presence, reader) = check(["135790", "135790"])
        let pin = try await presence.newPIN(minimumLength: KeyPairStore.minimumPINLength, confirm: true)
        #expect(text(pin) == "135790")
        #expect(reader.requests.count == 2)
        #expect(reader.requests.first?.prompt.contains("at least 6 characters") == true)
    }

    @Test("a new PIN that differs from its confirmation is rejected")
    func newPINMismatch() async throws {
        let (presence, _) = check(["135790", "135791"])
        let error = await #expect(throws: KeyAuthError.self) {
            try await presence.newPIN(minimumLength: KeyPairStore.minimumPINLength, confirm: true)
        }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("differ") == true)
    }

    @Test("a key file needs a PIN of six characters, counted as characters and not bytes")
    func newPINLength() async throws {
        #expect(KeyPairStore.minimumPINLength == 6)
        for short in ["4711", "12345", "ééé"] {
            let (presence, _) = check([short])
            let error = await #expect(throws: KeyAuthError.self) {
                try await presence.newPIN(minimumLength: KeyPairStore.minimumPINLength, confirm: false)
            }
            #expect(error?.code == .invalidArgument, "\(short)")
            #expect(error?.message.contains("at least 6 characters") == true)
        }
        let (accented, reader) = check(["éèêëēė"])
        _ = try await accented.newPIN(minimumLength: KeyPairStore.minimumPINLength, confirm: false)
        #expect(reader.requests.count == 1)
    }

    @Test("the minimum is the caller's: a store that counts guesses itself may ask for four")
    func newPINMinimumIsAParameter() async throws {
        let (presence, reader) = check(["4711"])
        let pin = try await presence.newPIN(minimumLength: 4, confirm: false)
        #expect(text(pin) == "4711")
        #expect(reader.requests.first?.prompt.contains("at least 4 characters") == true)
    }

    @Test("wrong PINs on a real PBKDF2 key file count; the right one resets the count and moves the file to scrypt")
    func countsAcrossMigration() async throws {
        let key = try RSAPrivateKey.generate(bits: 2048)
        let store = KeyPairStore(directory: directory.path + "/key")
        try store.store(key)
        let legacy = try key.pkcs8PEM(pin: SecretBytes(utf8: "246802"), encryption: .legacyPBKDF2)
        try Data(legacy).write(to: URL(fileURLWithPath: store.privateKeyPath))
        chmod(store.privateKeyPath, 0o600)
        let (presence, _) = check(["111111", "222222", "246802", "333333"])
        let load = { (pin: SecretBytes) throws(KeyAuthError) in try store.loadPrivateKey(pin: pin) }
        for left in [4, 3] {
            let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", load) }
            #expect(error?.code == .wrongPIN)
            #expect(error?.message.contains("\(left) attempts left") == true)
        }
        #expect(
            RSAPrivateKey.pinEncryption(
                ofPEM: [UInt8](try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath)))) == .legacyPBKDF2)
        #expect(try await presence.withPIN(reason: "", load).publicKey == key.publicKey)
        #expect(
            RSAPrivateKey.pinEncryption(
                ofPEM: [UInt8](try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath)))) == .standard)
        // The success reset the count: the next wrong PIN is the first again.
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", load) }
        #expect(error?.code == .wrongPIN)
        #expect(error?.message.contains("4 attempts left") == true)
    }

    @Test("the PIN decrypts a real PIN-encrypted RSA key, and a wrong one fails with wrongPIN")
    func realKey() async throws {
        let key = try RSAPrivateKey.generate(bits: 2048)
        let pem = try key.pkcs8PEM(
            pin: SecretBytes(utf8: "2468"), encryption: PINKeyEncryption(.scrypt(n: 1024, r: 8, p: 1)))
        let (presence, _) = check(["2468", "8642"])
        let decrypted = try await presence.withPIN(reason: "") { (pin) throws(KeyAuthError) in
            try RSAPrivateKey(pemRepresentation: pem, pin: pin)
        }
        #expect(decrypted.publicKey == key.publicKey)
        let error = await #expect(throws: KeyAuthError.self) {
            try await presence.withPIN(reason: "") { (pin) throws(KeyAuthError) in
                try RSAPrivateKey(pemRepresentation: pem, pin: pin)
            }
        }
        #expect(error?.code == .wrongPIN)
    }
}

@Suite("Presence PAM check")
struct PresencePAMTests {
    private let directory: TemporaryDirectory

    init() throws {
        directory = try TemporaryDirectory()
        try directory.write("permit", "auth required pam_permit.so\naccount required pam_permit.so\n")
        try directory.write("deny-auth", "auth required pam_deny.so\naccount required pam_permit.so\n")
        try directory.write("deny-account", "auth required pam_permit.so\naccount required pam_deny.so\n")
        // pam_exec asks the conversation for the password and pipes it, NUL-terminated, to grep.
        try directory.write(
            "password",
            """
            auth optional pam_echo.so Touch the key
            auth required pam_exec.so expose_authtok quiet /usr/bin/grep -qxzF correct-horse
            account required pam_permit.so

            """)
    }

    private func check(_ service: String, answers: [String] = []) -> (PAMPresence, FixedSecretReader) {
        let reader = FixedSecretReader(answers: answers)
        let presence = PAMPresence(
            serviceName: service, user: "root", configurationDirectory: directory.path, prompter: reader)
        return (presence, reader)
    }

    @Test("a stack that permits authentication and the account succeeds")
    func permit() async throws {
        let (presence, reader) = check("permit")
        #expect(presence.isAvailable())
        #expect(presence.kind == .pam)
        try await presence.verifyPresence(reason: "Sign in to example.com")
        #expect(reader.messages == ["Sign in to example.com"])
    }

    @Test("a stack that denies authentication fails with presenceDenied and PAM's text")
    func denyAuthentication() async throws {
        let (presence, _) = check("deny-auth")
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .presenceDenied)
        let native = error?.underlying as? NativeError
        #expect(native?.library == "pam")
        #expect(native?.code != 0)
        #expect(native?.text.isEmpty == false)
        #expect(error?.message.contains("authentication") == true)
    }

    @Test("a stack that permits authentication but denies the account fails, so pam_acct_mgmt ran")
    func denyAccount() async throws {
        let (presence, _) = check("deny-account")
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .presenceDenied)
        #expect(error?.message.contains("account") == true)
        #expect((error?.underlying as? NativeError)?.library == "pam")
    }

    @Test("the conversation answers a module's password prompt with echo off")
    func conversationThroughLibPAM() async throws {
        let (presence, reader) = check("password", answers: ["correct-horse"])
        try await presence.verifyPresence(reason: "")
        #expect(reader.requests.count == 1)
        #expect(reader.requests.first?.echo == false)
        #expect(reader.requests.first?.prompt.contains("assword") == true)
        #expect(reader.messages == ["Touch the key"])
    }

    @Test("a wrong answer to the module's prompt fails with presenceDenied")
    func wrongPassword() async throws {
        let (presence, _) = check("password", answers: ["battery-staple"])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .presenceDenied)
    }

    @Test("a prompter that cannot answer surfaces its own error, not PAM's")
    func prompterFailure() async throws {
        let (presence, _) = check("password", answers: [])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .cancelled)
    }

    @Test("an unknown service is unavailable")
    func unknownService() async throws {
        let (presence, reader) = check("no-such-service")
        #expect(!presence.isAvailable())
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "why") }
        #expect(error?.code == .presenceUnavailable)
        #expect(reader.messages.isEmpty)
    }

    @Test("a service name that is a path is rejected")
    func pathServiceName() async throws {
        let (presence, _) = check("../permit")
        #expect(!presence.isAvailable())
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .invalidArgument)
    }

    @Test("service names are looked up in lower case, as Linux-PAM does")
    func lowercaseService() async throws {
        let (presence, _) = check("PERMIT")
        #expect(presence.isAvailable())
        try await presence.verifyPresence(reason: "")
    }

    @Test("the default user is the effective user's login name")
    func defaultUser() {
        let presence = PAMPresence()
        let expected = getpwuid(geteuid()).flatMap { $0.pointee.pw_name }.map { String(cString: $0) }
        #expect(presence.user == expected)
        #expect(presence.serviceName == "keyauth")
        #expect(presence.configurationDirectory == nil)
    }

    @Test("the conversation function answers prompts with malloc'ed copies and shows messages")
    func conversationDirect() async throws {
        let reader = FixedSecretReader(answers: ["hunter2", "123456"])
        let result = try await runPAMConversation(
            [
                (.promptEchoOff, "Password: "), (.promptEchoOn, "Code: "), (.textInfo, "info"),
                (.errorMessage, "careful"),
            ],
            prompter: reader)
        #expect(result.status == 0)
        #expect(result.replies == ["hunter2", "123456", nil, nil])
        #expect(result.failure == nil)
        #expect(reader.requests == [.init(prompt: "Password: ", echo: false), .init(prompt: "Code: ", echo: true)])
        #expect(reader.messages == ["info", "careful"])
    }

    @Test("the conversation function returns no replies when the prompter fails")
    func conversationFailure() async throws {
        let reader = FixedSecretReader(answers: ["only one"])
        let result = try await runPAMConversation(
            [(.promptEchoOff, "Password: "), (.promptEchoOff, "Again: ")], prompter: reader)
        #expect(result.status != 0)
        #expect(result.replies.isEmpty)
        #expect(result.failure?.code == .cancelled)
    }

    @Test("the conversation function refuses an answer with a NUL byte")
    func conversationNUL() async throws {
        let reader = FixedSecretReader(answers: [SecretBytes([0x61, 0x00, 0x62])])
        let result = try await runPAMConversation([(.promptEchoOff, "Password: ")], prompter: reader)
        #expect(result.status != 0)
        #expect(result.failure?.code == .invalidArgument)
    }
}

/// Serialized: the terminal tests share the one process-wide slot that keeps a waiting
/// prompt's settings for a signal handler.
@Suite("Presence readers", .serialized)
struct PresenceReaderTests {
    /// A pipe whose write end the test feeds.
    private struct Pipe {
        let read: Int32
        let write: Int32

        init() throws {
            var descriptors: [Int32] = [0, 0]
            guard pipe(&descriptors) == 0 else { throw KeyAuthError(.storageFailed, "pipe failed") }
            read = descriptors[0]
            write = descriptors[1]
        }

        func send(_ text: String) {
            _ = text.utf8CString.withUnsafeBytes { Glibc.write(write, $0.baseAddress, $0.count - 1) }
        }
    }

    @Test("standard input yields one line at a time without its newline or carriage return")
    func standardInputLines() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        pipe.send("1234\nabcd\r\ntail")
        close(pipe.write)
        let reader = StandardInputSecretReader(fileDescriptor: pipe.read)
        #expect(text(try await reader.readSecret(prompt: "PIN: ")) == "1234")
        #expect(text(try await reader.readLine(prompt: "", echo: true)) == "abcd")
        #expect(text(try await reader.readSecret(prompt: "")) == "tail")
        let error = await #expect(throws: KeyAuthError.self) { try await reader.readSecret(prompt: "") }
        #expect(error?.code == .cancelled)
    }

    @Test("an empty line is an empty answer, not the end of input")
    func standardInputEmptyLine() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        pipe.send("\n")
        close(pipe.write)
        let secret = try await StandardInputSecretReader(fileDescriptor: pipe.read).readSecret(prompt: "")
        #expect(secret.count == 0)
    }

    @Test("a line longer than PAM's limit is rejected")
    func standardInputTooLong() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        pipe.send(String(repeating: "x", count: 600) + "\nnext\n")
        close(pipe.write)
        let reader = StandardInputSecretReader(fileDescriptor: pipe.read)
        let error = await #expect(throws: KeyAuthError.self) { try await reader.readSecret(prompt: "") }
        #expect(error?.code == .invalidArgument)
        #expect(text(try await reader.readSecret(prompt: "")) == "next")
    }

    @Test("a fixed reader answers in order and then cancels")
    func fixedReader() async throws {
        let reader = FixedSecretReader(answers: ["one"])
        #expect(text(try await reader.readSecret(prompt: "first")) == "one")
        let error = await #expect(throws: KeyAuthError.self) { try await reader.readSecret(prompt: "second") }
        #expect(error?.code == .cancelled)
        #expect(reader.requests.map(\.prompt) == ["first", "second"])
    }

    @Test("a terminal reader without a terminal is unavailable")
    func noTerminal() async throws {
        let reader = TerminalSecretReader(devicePath: "/nonexistent/tty")
        #expect(!reader.isAvailable())
        let error = await #expect(throws: KeyAuthError.self) { try await reader.readSecret(prompt: "PIN: ") }
        #expect(error?.code == .presenceUnavailable)
        let notATerminal = TerminalSecretReader(devicePath: "/dev/null")
        #expect(!notATerminal.isAvailable())
        let error2 = await #expect(throws: KeyAuthError.self) { try await notATerminal.readSecret(prompt: "") }
        #expect(error2?.code == .presenceUnavailable)
    }

    @Test("the terminal reader prompts on a pseudo-terminal with echo off and restores echo")
    func pseudoTerminalEchoOff() async throws {
        let terminal = try PseudoTerminal()
        let reader = TerminalSecretReader(devicePath: terminal.path)
        #expect(reader.isAvailable())
        async let answer = reader.readSecret(prompt: "PIN: ")
        var output = try await terminal.readUntil("PIN: ")
        terminal.send("s3cret\n")
        #expect(text(try await answer) == "s3cret")
        try await Task.sleep(for: .milliseconds(50))
        output += terminal.readAvailable()
        #expect(!output.contains("s3cret"))
        #expect(terminal.echoIsOn)
    }

    @Test("an interrupt at a waiting prompt restores echo and ends the line, once")
    func interruptRestoresTerminal() async throws {
        #expect(!TerminalSecretReader.restoreTerminalAfterInterrupt())
        let terminal = try PseudoTerminal()
        let reader = TerminalSecretReader(devicePath: terminal.path)
        async let answer = reader.readSecret(prompt: "PIN: ")
        _ = try await terminal.readUntil("PIN: ")
        #expect(!terminal.echoIsOn)
        #expect(TerminalSecretReader.restoreTerminalAfterInterrupt())
        #expect(terminal.echoIsOn)
        #expect(terminal.readAvailable(waiting: 500) == "\r\n")
        #expect(!TerminalSecretReader.restoreTerminalAfterInterrupt())
        // The prompt, still reading, finishes without ending the line a second time: all that
        // shows is the terminal's own echo, on again.
        terminal.send("s3cret\n")
        #expect(text(try await answer) == "s3cret")
        try await Task.sleep(for: .milliseconds(100))
        #expect(terminal.readAvailable(waiting: 200) == "s3cret\r\n")
        #expect(terminal.echoIsOn)
    }

    @Test("the terminal reader shows the answer when echo is requested")
    func pseudoTerminalEchoOn() async throws {
        let terminal = try PseudoTerminal()
        let reader = TerminalSecretReader(devicePath: terminal.path)
        async let answer = reader.readLine(prompt: "Code: ", echo: true)
        _ = try await terminal.readUntil("Code: ")
        terminal.send("778899\n")
        #expect(text(try await answer) == "778899")
        try await Task.sleep(for: .milliseconds(50))
        #expect(terminal.readAvailable().contains("778899"))
    }
}

extension PseudoTerminal {
    /// Reads what the terminal shows until `marker` appears, for at most five seconds.
    ///
    /// It sleeps between polls instead of blocking, so that the reader's task gets a thread of
    /// the small cooperative pool.
    func readUntil(_ marker: String) async throws -> String {
        var output = ""
        for _ in 0..<250 where !output.contains(marker) {
            output += readAvailable()
            try await Task.sleep(for: .milliseconds(20))
        }
        guard output.contains(marker) else {
            throw KeyAuthError(.presenceUnavailable, "no prompt, got \(output.debugDescription)")
        }
        return output
    }
}

@Suite("Presence opt-out and kinds")
struct PresenceKindTests {
    @Test("no presence check is always available and never asks")
    func noPresence() async throws {
        let presence = NoPresence()
        #expect(presence.kind == .none)
        #expect(presence.isAvailable())
        try await presence.verifyPresence(reason: "anything")
    }

    @Test("presence kinds encode as their stable names")
    func kindsEncode() throws {
        let kinds: [PresenceKind] = [.pin, .pam, .none]
        let data = try JSONEncoder().encode(kinds)
        #expect(String(decoding: data, as: UTF8.self) == #"["pin","pam","none"]"#)
        #expect(try JSONDecoder().decode([PresenceKind].self, from: data) == kinds)
    }
}
