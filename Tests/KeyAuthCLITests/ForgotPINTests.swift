import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// Someone who forgot the PIN runs into the delay after five wrong ones: the message that says
/// so also says where to read what to do (`keyauth reset --help`), and the exit status stays 77.
@Suite("A PIN lockout points to what to do about a forgotten PIN", .timeLimit(.minutes(5)))
struct ForgotPINTests {
    @Test("the wrong PIN that starts the delay, and the lockout after it, end with the pointer (exit 77)")
    func lockoutPointsToReset() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let registered = await harness.run(
            ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
            standardInput: "246802\n")
        #expect(registered.status == 0, "\(registered.standardError)")
        for attempt in 1..<PINPresence.freeAttempts {
            let wrong = await harness.run(["login", "--pin-stdin"], standardInput: "975310\n")
            #expect(wrong.status == 77)
            // Not yet locked: a wrong PIN is no sign of a forgotten one.
            #expect(!wrong.standardError.contains("forgot the PIN"), "attempt \(attempt): \(wrong.standardError)")
        }
        let last = await harness.run(["login", "--pin-stdin"], standardInput: "975310\n")
        #expect(last.status == 77)
        #expect(last.errorLines.count == 1)
        #expect(last.errorLines.first?.contains("too many wrong PINs; try again in") == true, "\(last.standardError)")
        #expect(
            last.errorLines.first?.hasSuffix(" (forgot the PIN? see keyauth reset --help)") == true,
            "\(last.standardError)")
        let locked = await harness.run(["login", "--pin-stdin"], standardInput: "246802\n")
        #expect(locked.status == 77)
        #expect(locked.errorLines.count == 1)
        #expect(
            locked.errorLines.first?.hasPrefix("keyauth: too many wrong PINs; try again in ") == true,
            "\(locked.standardError)")
        #expect(
            locked.errorLines.first?.hasSuffix(" (forgot the PIN? see keyauth reset --help)") == true,
            "\(locked.standardError)")
        let help = await harness.run(["reset", "--help"])
        #expect(help.standardOutput.contains("Forgot the PIN? Run keyauth reset --local-only"))
    }

    @Test("other errors, and a message that already ends with the pointer, are left as they are")
    func onlyLockouts() {
        let plain = KeyAuthError(.wrongPIN, "wrong PIN; a delay starts after 2 more wrong PINs")
        #expect(KeyAuthCommand.withNextStep(plain).message == plain.message)
        let transport = KeyAuthError(.transportFailed, "cannot connect", retryAfter: 5)
        #expect(KeyAuthCommand.withNextStep(transport).message == transport.message)
        let tpm = KeyAuthError(.lockedOut, "the TPM is locked after too many wrong PINs and refuses its keys")
        let pointed = KeyAuthCommand.withNextStep(tpm)
        #expect(pointed.message == tpm.message + KeyAuthCommand.forgotPINPointer)
        #expect(pointed.code == .lockedOut)
        #expect(KeyAuthCommand.withNextStep(pointed).message == pointed.message)
    }
}
