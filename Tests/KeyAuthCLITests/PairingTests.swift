import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// The laptop's PIN.
private let pairingPIN = "864209"

/// Runs `body` with a laptop registered for alice and a desktop registered after it, pending
/// (`--no-wait`, named "desktop"), the desktop's KID and what its registration printed.
private func withPendingDesktop(_ body: (Machine, Machine, String, CommandResult) throws -> Void) throws {
    try withServer { server in
        let laptop = Machine()
        let desktop = Machine()
        defer {
            laptop.home.remove()
            desktop.home.remove()
        }
        // The laptop has a PIN: approving a device needs a presence check on the approving one.
        #expect(try laptop.register(server, user: "alice", extra: ["--name", "laptop"], pin: pairingPIN).status == 0)
        let pending = try desktop.register(server, user: "alice", extra: ["--name", "desktop", "--no-wait"])
        #expect(pending.status == 75, "\(pending.standardError)")
        let keyID = try #require(try desktop.accounts.load(desktop.accounts.resolve(nil)).keyID)
        try body(laptop, desktop, keyID, pending)
    }
}

@Suite("Pairing a second device with short codes, with the built binary", .serialized, .timeLimit(.minutes(10)))
struct PairingTests {
    @Test(
        "a pending registration prints its short code; the first device lists it, marks it and approves it by that code"
    )
    func shortCodeApproval() throws {
        try withPendingDesktop { laptop, desktop, keyID, pending in
            let short = String(keyID.prefix(8))
            #expect(pending.standardError.contains("run `keyauth devices approve \(short)` (short code \(short)"))
            #expect(pending.standardOutput.contains("short code \(short)"))

            let table = try laptop.run(["devices"])
            let row = try #require(table.standardOutput.split(separator: "\n").first { $0.hasPrefix(keyID) })
            #expect(row.contains("pending !"))
            #expect(table.standardOutput.contains("! 1 waiting for approval"))

            // Without a terminal, `approve` alone lists the pending devices and asks for a code.
            let choose = try laptop.run(["devices", "approve"])
            #expect(choose.status == 64)
            #expect(choose.standardOutput.contains("1) \(short) \"desktop\", registered "))
            #expect(choose.standardOutput.contains(" from 127.0.0.1"))

            #expect(try laptop.run(["devices", "approve", String(keyID.prefix(7))]).status == 64)
            let approve = try laptop.run(
                ["devices", "approve", short, "--pin-stdin"], standardInput: pairingPIN + "\n")
            #expect(approve.status == 0, "\(approve.standardError)")
            #expect(approve.standardOutput.hasPrefix("Approved device \(keyID) \"desktop\""))
            #expect(try desktop.run(["login"]).status == 0)
        }
    }

    @Test("approve with no argument on a terminal shows the pending devices and approves the one chosen")
    func chooseOnTerminal() throws {
        try withPendingDesktop { laptop, desktop, keyID, _ in
            let process = try TerminalProcess(
                Binaries.keyauth, ["devices", "approve"], environment: laptop.environment)
            #expect(process.readUntil("Enter for none] ").contains("Approve which one? [1-1, or Enter for none] "))
            process.type("1\n")
            // The approval is signed after the laptop's own presence check.
            #expect(process.readUntil("PIN: ").contains("Approve the new device desktop"))
            process.type(pairingPIN + "\n")
            #expect(process.wait() == 0, "\(process.standardError)")
            #expect(process.standardOutput.contains("1) \(keyID.prefix(8)) \"desktop\""))
            #expect(process.standardOutput.contains("Approved device \(keyID) \"desktop\""))
            #expect(try desktop.run(["login"]).status == 0)
        }
    }

    @Test("revoking a pending device says it was denied, and the denied device is told so")
    func denyPending() throws {
        try withPendingDesktop { laptop, desktop, keyID, _ in
            let deny = try laptop.run(["devices", "revoke", String(keyID.prefix(10))])
            #expect(deny.status == 0, "\(deny.standardError)")
            #expect(deny.standardOutput == "Denied pending device \(keyID) \"desktop\"; it cannot log in.\n")
            let login = try desktop.run(["login"])
            #expect(login.status == 77)
            #expect(login.standardError.contains("denied"))
            #expect(!login.standardError.contains("revoked"))
            #expect(login.standardError.contains("to start again"))

            let ownKeyID = try #require(try laptop.accounts.load(laptop.accounts.resolve(nil)).keyID)
            let revoke = try laptop.run(["devices", "revoke", ownKeyID])
            #expect(revoke.standardOutput.hasPrefix("Revoked device \(ownKeyID)"))
        }
    }

    @Test("an expired pending registration says how to start again")
    func expiredPending() throws {
        let responder = try LoopbackHTTPResponder { _ in
            .oauthError(400, "expired_token", "the registration expired")
        }
        defer { responder.stop() }
        let url = "http://127.0.0.1:\(responder.port)"
        let machine = try Machine.withStoredAccount(server: url)
        defer { machine.home.remove() }
        let name = try machine.accounts.resolve(nil)
        let login = try machine.run(["login"])
        #expect(login.status == 77)
        expectOneErrorLine(login)
        #expect(
            login.standardError.contains(
                "to start again, run `keyauth reset --account \(name) --local-only`, then "
                    + "`keyauth register --server \(url) --user alice`"))
    }

    @Test("a prefix shared by several devices lists them; one that names none says so")
    func ambiguousPrefix() throws {
        let devices = [
            Device(
                keyID: "abcdefgh" + String(repeating: "A", count: 35), name: "one", status: .active, createdAt: nil,
                lastLoginAt: nil),
            Device(
                keyID: "abcdefgh" + String(repeating: "B", count: 35), name: "two", status: .pending, createdAt: nil,
                lastLoginAt: nil),
        ]
        let ambiguous = #expect(throws: KeyAuthError.self) {
            try DeviceMatch.device("abcdefgh", in: devices, user: "alice")
        }
        #expect(ambiguous?.message.contains("matches 2 devices") == true)
        #expect(ambiguous?.message.contains(devices[0].keyID + " \"one\" (active)") == true)
        #expect(ambiguous?.message.contains(devices[1].keyID + " \"two\" (pending)") == true)
        #expect(try DeviceMatch.device("abcdefghB", in: devices, user: "alice").name == "two")
        let none = #expect(throws: KeyAuthError.self) { try DeviceMatch.device("zzzzzzzz", in: devices, user: "alice") }
        #expect(none?.message.contains("no device of alice has a KID starting with zzzzzzzz") == true)
        #expect(!DeviceMatch.isValidPrefix("abcdefg"))
        #expect(!DeviceMatch.isValidPrefix("abcd efgh"))
        #expect(DeviceMatch.isValidPrefix("-bcdefgh"))
    }
}
