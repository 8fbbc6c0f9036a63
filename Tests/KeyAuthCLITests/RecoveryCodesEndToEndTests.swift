import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// The laptop's PIN.
private let laptopPIN = "864209"

@Suite("Recovery codes with the built binaries", .serialized, .timeLimit(.minutes(10)))
struct RecoveryCodesEndToEndTests {
    /// The codes `keyauth recovery-codes` printed: the lines of five groups of four symbols of
    /// Crockford's base32.
    private static func codes(in output: String) -> [String] {
        let alphabet = Set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
        return output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { line in
            let groups = line.split(separator: "-", omittingEmptySubsequences: false)
            return groups.count == 5 && groups.allSatisfy { $0.count == 4 && $0.allSatisfy(alphabet.contains) }
        }
    }

    @Test(
        "codes made after the PIN enrol a new device once every device is lost, and the same code is refused the second time"
    )
    func recoverAfterLosingEveryDevice() throws {
        let directory = TemporaryDirectory("keyauth-recovery")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess.started(in: directory.path)
        defer { server.terminate() }
        let laptop = Machine()
        let phone = Machine()
        let tablet = Machine()
        defer { [laptop, phone, tablet].forEach { $0.home.remove() } }

        #expect(try laptop.register(server, user: "alice", extra: ["--name", "laptop"], pin: laptopPIN).status == 0)
        let wrongPIN = try laptop.run(["recovery-codes", "--pin-stdin"], standardInput: "000000\n")
        #expect(wrongPIN.status != 0)
        #expect(Self.codes(in: wrongPIN.standardOutput).isEmpty)
        let made = try laptop.run(["recovery-codes", "--pin-stdin"], standardInput: laptopPIN + "\n")
        #expect(made.status == 0, "\(made.standardError)\n\(server.log)")
        let codes = Self.codes(in: made.standardOutput)
        #expect(codes.count == 10, "\(made.standardOutput)")
        #expect(made.standardOutput.contains("shown only now"))

        // The laptop is gone: its key revoked, nothing left here.
        let reset = try laptop.run(["reset", "--yes", "--pin-stdin"], standardInput: laptopPIN + "\n")
        #expect(reset.status == 0, "\(reset.standardError)")
        let stranded = try phone.register(server, user: "alice")
        #expect(stranded.status != 0)

        // A code read from standard input, typed in lower case, enrols the phone at once.
        let recovered = try phone.run(
            [
                "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none",
                "--name", "phone", "--recovery-code", "-",
            ],
            standardInput: codes[0].lowercased() + "\n")
        #expect(recovered.status == 0, "\(recovered.standardError)")
        #expect(recovered.standardOutput.contains("Registered this device"))
        #expect(try phone.run(["login"]).status == 0)
        let devices = try phone.run(["devices", "--json"])
        let listed = try #require(try JSONValue(parsing: Array(devices.standardOutput.utf8))["devices"]?.arrayValue)
        #expect(listed.contains { $0["name"] == .string("phone") && $0["status"] == .string("active") })
        #expect(listed.contains { $0["name"] == .string("laptop") && $0["status"] == .string("revoked") })

        // The same code a second time: refused, and nothing is kept on the tablet.
        let reused = try tablet.run(
            [
                "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none",
                "--recovery-code", codes[0],
            ])
        #expect(reused.status == 77)
        #expect(
            reused.standardError.contains(
                "keyauth: the server refused the registration (access_denied): the recovery code is not valid for "
                    + "this user (each code works once, and a new set replaces the old one); try another of your recovery "
                    + "codes, or ask an administrator for an enrollment code (`keyauth-server enroll alice`) and pass it "
                    + "with --enrollment-code\n"), "\(reused.standardError)")
        #expect(tablet.accounts.accountNames().isEmpty)

        let audit = try KeyAuthServerProcess.runCommand(["audit", "--db", directory.path + "/server.db"])
        #expect(audit.output.contains("recovery-codes"), "\(audit.output)")
        #expect(audit.output.contains("use-recovery-code") && audit.output.contains("9 codes left"), "\(audit.output)")
        #expect(!codes.contains { audit.output.contains($0) })
    }

    @Test(
        "a code used while a device remains: that device lists a recovery notice, and keyauth deny revokes the new device"
    )
    func remainingDeviceSeesTheNotice() throws {
        try withServer { server in
            let laptop = Machine()
            let thief = Machine()
            defer { [laptop, thief].forEach { $0.home.remove() } }
            #expect(try laptop.register(server, user: "alice", pin: laptopPIN).status == 0)
            let made = try laptop.run(["recovery-codes", "--pin-stdin"], standardInput: laptopPIN + "\n")
            let code = try #require(Self.codes(in: made.standardOutput).first)
            let stolen = try thief.register(server, user: "alice", extra: ["--name", "thief", "--recovery-code", code])
            #expect(stolen.status == 0, "\(stolen.standardError)")

            let listed = try laptop.run(["requests", "--pin-stdin"], standardInput: laptopPIN + "\n")
            #expect(listed.status == 0, "\(listed.standardError)")
            let row = try #require(
                listed.standardOutput.split(separator: "\n").first { $0.contains("a recovery code enrolled") },
                "\(listed.standardOutput)")
            #expect(row.contains("\"thief\""))
            let id = try #require(row.split(separator: " ").first.map(String.init))
            let denied = try laptop.run(["deny", id, "--pin-stdin"], standardInput: laptopPIN + "\n")
            #expect(denied.status == 0, "\(denied.standardError)")
            #expect(
                denied.standardOutput
                    == "Denied recovery notice \(id): the device the recovery code enrolled is revoked and can no "
                    + "longer log in.\n", "\(denied.standardOutput)")
            #expect(try thief.run(["login"]).status != 0)
        }
    }

    @Test("a device registered without a presence check cannot make recovery codes (exit 77)")
    func presenceNeeded() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "alice").status == 0)
            let refused = try machine.run(["recovery-codes"])
            #expect(refused.status == 77, "\(refused.standardError)")
            #expect(refused.standardError.contains("making recovery codes needs one"))
        }
    }
}
