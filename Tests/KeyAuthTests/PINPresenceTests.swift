import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Presence PIN check")
struct PresencePINTests {
    private let directory = ScratchDirectory("keyauth-presence")
    private let clock = TestClock(1_700_000_000)
    private var attemptsFile: String { "\(directory.path)/pin-attempts" }

    private func check(_ answers: [String]) -> (PINPresence, FixedSecretReader) {
        let reader = FixedSecretReader(answers: answers)
        return (PINPresence(reader: reader, attemptsFile: attemptsFile, clock: clock.clock), reader)
    }

    private func failTimes(_ count: Int) async {
        let (presence, _) = check(Array(repeating: "0000", count: count))
        for _ in 0..<count {
            await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "test", decrypt) }
        }
    }

    @Test(
        "after a TPM refused its PIN, the check asks again only for a wrong PIN that starts no wait, up to its attempts"
    )
    func asksAgainAfterHardwareRefusal() {
        let (presence, reader) = check([])
        let wrong = KeyAuthError(.wrongPIN, "wrong PIN; the TPM locks out after 2 more wrong PINs")
        #expect(presence.asksAgain(afterHardwareRefusal: wrong, refusals: 1))
        #expect(presence.asksAgain(afterHardwareRefusal: wrong, refusals: 2))
        #expect(reader.messages == [wrong.message, wrong.message])
        // The third PIN of the run was the last; a lock (with a wait, or one only the owner
        // lifts) and any other error end the run.
        #expect(!presence.asksAgain(afterHardwareRefusal: wrong, refusals: 3))
        let locking = KeyAuthError(.wrongPIN, "wrong PIN; the TPM is now locked", retryAfter: 1000)
        #expect(!presence.asksAgain(afterHardwareRefusal: locking, refusals: 1))
        #expect(!presence.asksAgain(afterHardwareRefusal: KeyAuthError(.lockedOut, "locked"), refusals: 1))
        #expect(!presence.asksAgain(afterHardwareRefusal: KeyAuthError(.tpmUnavailable, "gone"), refusals: 1))
        #expect(reader.messages.count == 2)
        var once = presence
        once.attemptsPerRun = 1
        #expect(!once.asksAgain(afterHardwareRefusal: wrong, refusals: 1), "--pin-stdin reads one PIN")
        #expect(!NoPresence().asksAgain(afterHardwareRefusal: wrong, refusals: 1))
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
        #expect(error?.message.contains("a delay starts after 4 more wrong PINs") == true)
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

    @Test("wrong PINs recorded before the clock was set back delay the next one by one delay, not by the step back")
    func clockSetBackAfterFailures() async throws {
        await failTimes(5)
        let counter = PINAttemptCounter(attemptsFile: attemptsFile, clock: clock.clock)
        #expect(throws: KeyAuthError.self) { try counter.checkLockout() }
        // The clock steps back a day; the lockout counts its 30 s from the first look after.
        clock.advance(by: -86_400)
        do {
            try counter.checkLockout()
            Issue.record("no lockout right after the step back")
        } catch {
            #expect(error.code == .lockedOut && error.retryAfter == 30, "\(error.message)")
        }
        clock.advance(by: 20)
        do {
            _ = try counter.counting { () throws(KeyAuthError) in 1 }
            Issue.record("a PIN was tried within the delay")
        } catch {
            #expect(error.code == .lockedOut && error.retryAfter == 10, "\(error.message)")
        }
        clock.advance(by: 11)
        try counter.checkLockout()
        #expect(try counter.counting { () throws(KeyAuthError) in 42 } == 42)
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

    @Test("a damaged attempts file fails closed with storageFailed; one others may read, with keyUnprotected")
    func damagedFile() async throws {
        try directory.write("pin-attempts", "not json")
        chmod(directory.path + "/pin-attempts", 0o600)
        let (presence, reader) = check(["2468", "2468"])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(error?.code == .storageFailed)
        #expect(reader.requests.isEmpty)
        // Too open is not damaged: the command's exit 65 names the chmod.
        chmod(directory.path + "/pin-attempts", 0o644)
        let open = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(open?.code == .keyUnprotected)
        #expect(reader.requests.isEmpty)
    }

    @Test("a count at the largest integer, in a damaged file, is an attempt like another, not a crash")
    func hugeCount() async throws {
        try directory.write("pin-attempts", #"{"lastFailure":0,"failures":\#(Int.max)}"#)
        chmod(attemptsFile, 0o600)
        let (presence, _) = check(["0000"])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.withPIN(reason: "", decrypt) }
        #expect(error?.code == .wrongPIN)
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
            #expect(error?.message.contains("a delay starts after \(left) more wrong PINs") == true)
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
        #expect(error?.message.contains("a delay starts after 4 more wrong PINs") == true)
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
