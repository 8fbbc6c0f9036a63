import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

@Suite("keyauth devices: pages, addresses and approvals", .timeLimit(.minutes(10)))
struct DevicesCommandTests {
    /// Registers alice without a PIN and returns the harness and server.
    private func registered() async throws -> (CommandHarness, InProcessKeyAuthServer) {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        let result = await harness.registerUnattended(server.url)
        #expect(result.status == 0, "\(result.standardError)")
        return (harness, server)
    }

    @Test("the table lists every device over three pages with a REGISTERED FROM column")
    func threePagesInTheTable() async throws {
        let (harness, server) = try await registered()
        defer {
            server.stop()
            harness.home.remove()
        }
        try server.addDevices(249, user: "alice")
        let table = await harness.run(["devices"])
        #expect(table.status == 0, "\(table.standardError)")
        let lines = table.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasSuffix("REGISTERED FROM") == true)
        #expect(lines.filter { $0.contains("fake-device-") }.count == 249)
        #expect(table.standardOutput.contains("198.51.100.248"))
        #expect(table.standardOutput.contains("192.0.2.10"))
        #expect(!table.standardOutput.contains("showing the first"))
        // Three pages: the first, then each from the cursor the page before ended with.
        #expect(server.issuedCursors.count == 2)
        #expect(server.listQueries == ["limit=100"] + server.issuedCursors.map { "limit=100&cursor=" + $0 })
    }

    @Test("beyond ten pages the command says it shows the first 1000 devices, and --json marks it truncated")
    func truncated() async throws {
        let (harness, server) = try await registered()
        defer {
            server.stop()
            harness.home.remove()
        }
        try server.addDevices(1200, user: "alice")
        let table = await harness.run(["devices"])
        #expect(table.status == 0, "\(table.standardError)")
        #expect(table.standardOutput.contains("showing the first 1000 devices; the server has more"))
        let json = await harness.run(["devices", "--json"])
        let document = try JSONValue(parsing: json.standardOutput)
        #expect(document["truncated"] == .bool(true))
        #expect(document["devices"]?.arrayValue?.count == 1000)
        #expect(document["devices"]?.arrayValue?.first?["registered_from"] == .string("192.0.2.10"))
    }

    @Test("approve prints the name, creation time and address of the device it let in")
    func approvePrintsTheDevice() async throws {
        let (first, server) = try await registered()
        let second = CommandHarness()
        defer {
            server.stop()
            first.home.remove()
            second.home.remove()
        }
        server.registrationAddress = "203.0.113.77"
        let pending = await second.registerUnattended(server.url, extra: ["--name", "kitchen-pc", "--no-wait"])
        #expect(pending.status == 75, "\(pending.standardError)")
        let kid = try #require(server.keyIDs(withStatus: "pending").first)
        let registered = RFC3339.string(fromSeconds: try #require(try server.device(kid)).createdAt)
        // Without a presence check, this device cannot approve one: it says so and changes nothing.
        let keyOnly = await first.run(["devices", "approve", kid])
        #expect(keyOnly.status == 77)
        #expect(keyOnly.standardError.contains("--presence none"), "\(keyOnly.standardError)")
        #expect(server.keyIDs(withStatus: "pending") == [kid])
        let withPIN = CommandHarness()
        defer { withPIN.home.remove() }
        let code = try server.enrollmentCode(for: "alice")
        let added = await withPIN.run(
            [
                "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin",
                "--enrollment-code", code, "--name", "desk",
            ], standardInput: "123456\n")
        #expect(added.status == 0, "\(added.standardError)")
        let approve = await withPIN.run(["devices", "approve", kid, "--pin-stdin"], standardInput: "123456\n")
        #expect(approve.status == 0, "\(approve.standardError)")
        #expect(
            approve.standardOutput
                == "Approved device \(kid) \"kitchen-pc\", registered \(registered) from 203.0.113.77.\n")
    }

    @Test("control characters from the server never reach the terminal")
    func controlCharactersNeutralized() {
        let device = Device(
            keyID: "kid", name: "evil\u{1B}[2J", status: .pending, createdAt: nil, lastLoginAt: nil,
            registeredFrom: "10.0.0.1\u{1B}]0;owned\u{07}")
        let table = DevicesCommand.table(DeviceList(devices: [device], isTruncated: false), ownKeyID: nil)
        #expect(!table.contains("\u{1B}"))
        #expect(!table.contains("\u{07}"))
        #expect(table.contains("10.0.0.1?]0;owned?"))
    }
}
