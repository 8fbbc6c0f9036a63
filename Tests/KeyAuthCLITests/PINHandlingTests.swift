import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

/// A machine whose key file opens with `pin`; its server is unavailable (503), so a login that
/// got past the PIN exits 69.
private func machineWithPINKey(_ pin: String) throws -> Machine {
    try Machine.withStoredAccount(server: try UnavailableServer.url(), pin: pin)
}

@Suite("PIN prompts and PIN changes with the built binary", .serialized, .timeLimit(.minutes(10)))
struct PINHandlingTests {
    @Test("a wrong PIN on the terminal is asked again, up to three times, with one wording")
    func threeAttempts() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        let process = try TerminalProcess(Binaries.keyauth, ["login"], environment: machine.environment)
        _ = process.readUntil("PIN: ")
        process.type("000000\n")
        let second = process.readUntil("PIN: ")
        #expect(second.contains("wrong PIN; a delay starts after 4 more wrong PINs"))
        process.type("111111\n")
        let third = process.readUntil("PIN: ")
        #expect(third.contains("wrong PIN; a delay starts after 3 more wrong PINs"))
        process.type("135790\n")
        // The third try opened the key; the login then fails at the server that is unavailable.
        #expect(process.wait() == 69)
        #expect(process.standardError.contains("temporarily unavailable"))

        let failing = try TerminalProcess(Binaries.keyauth, ["login"], environment: machine.environment)
        for wrong in ["000000", "111111", "222222"] {
            _ = failing.readUntil("PIN: ")
            failing.type(wrong + "\n")
        }
        #expect(failing.wait() == 77)
        #expect(failing.standardError == "keyauth: wrong PIN; a delay starts after 2 more wrong PINs\n")
    }

    @Test("--pin-stdin gets one attempt: the next line is not a second PIN")
    func oneAttemptFromStandardInput() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        let login = try machine.run(["login", "--pin-stdin"], standardInput: "000000\n135790\n")
        #expect(login.status == 77)
        #expect(login.standardError == "keyauth: wrong PIN; a delay starts after 4 more wrong PINs\n")
    }

    @Test("a PIN attempts file others can read exits 65 like every too-open secret")
    func openAttemptsFile() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        #expect(try machine.run(["login", "--pin-stdin"], standardInput: "000000\n").status == 77)
        let attempts = try machine.keyDirectory() + "/pin-attempts"
        #expect(chmod(attempts, 0o644) == 0)
        let login = try machine.run(["login", "--pin-stdin"], standardInput: "135790\n")
        #expect(login.status == 65, "\(login.standardError)")
        #expect(login.standardError.contains("chmod 600"), "\(login.standardError)")
    }

    @Test("register asks again when the confirmation differs")
    func confirmationAgain() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let process = try TerminalProcess(
                Binaries.keyauth,
                ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--key-store", "file"],
                environment: machine.environment)
            _ = process.readUntil("characters): ")
            process.type("246802\n")
            _ = process.readUntil("Repeat the new PIN: ")
            process.type("246803\n")
            let again = process.readUntil("characters): ")
            #expect(again.contains("The two PINs differ. Try again."))
            process.type("246802\n")
            _ = process.readUntil("Repeat the new PIN: ")
            process.type("246802\n")
            #expect(process.wait() == 0, "\(process.standardError)")
            #expect(try machine.run(["login", "--pin-stdin"], standardInput: "246802\n").status == 0)
        }
    }

    @Test("register with a PIN too short is bad input (exit 64) and keeps nothing")
    func registerShortPIN() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let register = try machine.run(
                ["register", "--server", server.url, "--user", "alice", "--key-store", "file", "--pin-stdin"],
                standardInput: "1234\n")
            #expect(register.status == 64, "\(register.standardError)")
            #expect(register.standardError.contains("at least 6 characters. Nothing was registered."))
            #expect(try machine.run(["status"]).standardOutput.hasPrefix("No accounts in"), "no account was kept")
            #expect(
                try machine.run(
                    [
                        "register", "--server", server.url, "--user", "alice", "--key-store", "file",
                        "--pin-stdin",
                    ], standardInput: "123456\n"
                ).status == 0)
        }
    }

    @Test("pin change without the public key file exits 65 with advice before asking; reset of a corrupt account")
    func pinChangeMissingPublicKey() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        let directory = try machine.keyDirectory()
        try FileManager.default.removeItem(atPath: directory + "/device-key.pub")
        let change = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "135790\n864200\n")
        #expect(change.status == 65, "\(change.standardError)")
        #expect(change.standardError.contains("has no public key file"))
        #expect(change.standardError.contains("--local-only"))
        #expect(!FileManager.default.fileExists(atPath: directory + "/pin-attempts"), "no PIN was tried")

        try Data("{\"name\":".utf8).write(to: URL(fileURLWithPath: directory + "/account.json"))
        let reset = try machine.run(["reset", "--yes"])
        #expect(reset.status == 65, "\(reset.standardError)")
        #expect(reset.standardError.contains("is corrupt"))
        #expect(reset.standardError.contains("keyauth reset --account"))
        #expect(reset.standardError.contains("--local-only"))
        #expect(try machine.run(["reset", "--local-only", "--yes"]).status == 0)
    }

    @Test("pin change re-encrypts the key file under the new PIN; the old one stops working")
    func pinChange() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        let directory = try machine.keyDirectory()
        let before = try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.pem"))

        let wrong = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "000000\n864200\n")
        #expect(wrong.status == 77)
        #expect(wrong.standardError.hasPrefix("keyauth: wrong PIN"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.pem")) == before)

        let short = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "135790\n8642\n")
        #expect(short.status == 64, "a PIN too short is bad input: \(short.standardError)")
        #expect(short.standardError.contains("at least 6 characters"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.pem")) == before)

        let change = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "135790\n864200\n")
        #expect(change.status == 0, "\(change.standardError)")
        #expect(change.standardOutput.contains("Changed the PIN of account"))
        #expect(!change.standardOutput.contains("864200") && !change.standardError.contains("864200"))
        #expect(fileMode(directory + "/device-key.pem") == 0o600)
        let store = KeyPairStore(directory: directory)
        #expect(try store.loadPrivateKey(pin: SecretBytes(utf8: "864200")).publicKey == TestKeys.first.publicKey)
        #expect(throws: KeyAuthError.self) { try store.loadPrivateKey(pin: SecretBytes(utf8: "135790")) }
        // Old PIN refused at login, the new one opens the key (and fails only at the absent server).
        #expect(try machine.run(["login", "--pin-stdin"], standardInput: "135790\n").status == 77)
        #expect(try machine.run(["login", "--pin-stdin"], standardInput: "864200\n").status == 69)
    }

    @Test("pin change on a terminal asks the current PIN, then the new one twice")
    func pinChangeOnTerminal() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        let process = try TerminalProcess(Binaries.keyauth, ["pin", "change"], environment: machine.environment)
        #expect(process.readUntil("PIN: ").contains("Current PIN of account"))
        process.type("135790\n")
        _ = process.readUntil("characters): ")
        process.type("975310\n")
        _ = process.readUntil("Repeat the new PIN: ")
        process.type("975310\n")
        #expect(process.wait() == 0, "\(process.standardError)")
        let store = KeyPairStore(directory: try machine.keyDirectory())
        #expect(try store.loadPrivateKey(pin: SecretBytes(utf8: "975310")).publicKey == TestKeys.first.publicKey)
    }

    @Test("pin change on a TPM key whose blob is not one exits 65 before asking the TPM, and changes nothing")
    func pinChangeCorruptTPMBlob() throws {
        let machine = try machineWithPINKey("135790")
        defer { machine.home.remove() }
        let directory = try machine.keyDirectory()
        // The store sees a TPM key by its blob's file name; this one holds a key file's PEM.
        try FileManager.default.moveItem(atPath: directory + "/device-key.pem", toPath: directory + "/device-key.tpm")
        let before = try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.tpm"))
        let change = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "135790\n864200\n")
        #expect(change.status == 65)
        #expect(change.standardError.contains("device-key.tpm is corrupt"))
        #expect(!change.standardError.contains("135790") && !change.standardError.contains("864200"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/device-key.tpm")) == before)
    }
}
