import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("keyauth-server audit trail", .timeLimit(.minutes(10)))
struct AuditTests {
    @Test("enroll, approve by a device, deny and revoke by the administrator are audited; audit prints them")
    func auditedActions() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        try StorageFactory.open(database).close()
        let enroll = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["enroll", "alice", "--db", database, "--config", "/dev/null"], environment: [:],
                output: enroll.output) == 0)
        let code = enroll.standard.trimmingCharacters(in: .whitespacesAndNewlines)
        // The commands run on the real clock: a second may have passed since the test clock
        // started, and the device's approval must not be dated before the enrollment.
        environment.clock.advance(by: max(0, ServerClock.now() - environment.clock.now))

        let api = try environment.directAPI { $0.enrollment = .code }
        let first = try ServerTestKeys.key("alice-1")
        let second = try ServerTestKeys.key("alice-2")
        let third = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: first, code: code).status == 201)
        let token = try api.accessToken(first)
        #expect(try api.register(user: "alice", key: second, name: "work laptop").status == 202)
        #expect(try api.register(user: "alice", key: third, name: "phone").status == 202)
        let approve = try api.approveDevice(second.publicKey.fingerprint, approver: first, token: token)
        #expect(approve.status == 200)
        // Approving again changes nothing and records nothing.
        #expect(
            try api.approveDevice(second.publicKey.fingerprint, approver: first, token: token).status
                == 200)
        for kid in [third.publicKey.fingerprint, first.publicKey.fingerprint, first.publicKey.fingerprint] {
            #expect(
                ServerCommand.main(
                    arguments: ["revoke", kid, "--db", database, "--config", "/dev/null"], environment: [:],
                    output: CapturedOutput().output) == 0)
        }

        let audit = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["audit", "--since", "1h", "--db", database, "--config", "/dev/null"], environment: [:],
                output: audit.output) == 0)
        let rows = audit.standard.split(separator: "\n").map {
            $0.split(separator: " ", omittingEmptySubsequences: true)
        }
        #expect(rows.first == ["TIME", "ACTION", "ACTOR", "USER", "SUBJECT", "DETAIL"])
        let events = rows.dropFirst().map { Array($0.dropFirst().map(String.init)) }
        #expect(
            events == [
                ["enroll", "admin", "alice", "-", "-"],
                [
                    "approve", "device:\(first.publicKey.fingerprint)", "alice", second.publicKey.fingerprint, "work",
                    "laptop",
                ],
                ["deny", "admin", "alice", third.publicKey.fingerprint, "phone"],
                ["revoke", "admin", "alice", first.publicKey.fingerprint, "test-device"],
            ])
        // No enrollment code in the trail; names as stored, spaces included, the detail last.
        #expect(!audit.standard.contains(code))
        #expect(audit.standard.contains("  work laptop\n"))

        // --json: the same events, one array, null for what an event lacks.
        let json = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["audit", "--json", "--db", database, "--config", "/dev/null"], environment: [:],
                output: json.output) == 0)
        let objects = try #require(try JSONValue(parsing: json.standard).arrayValue)
        #expect(objects.count == 4)
        #expect(objects.first?["action"] == .string("enroll"))
        #expect(objects.first?["subject"] == .null)
        #expect(objects.dropFirst().first?["detail"] == .string("work laptop"))
        #expect(objects.last?["actor"] == .string("admin"))
        #expect(json.standard.hasPrefix("[{\"time\":\""))

        let later = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["audit", "--since", "2999-01-01", "--db", database, "--config", "/dev/null"],
                environment: [:], output: later.output) == 0)
        #expect(later.standard == "TIME  ACTION  ACTOR  USER  SUBJECT  DETAIL\n")

        // The built binary prints the same trail.
        let binary = try KeyAuthServerProcess.runCommand(["audit", "--db", database, "--config", "/dev/null"])
        #expect(binary.status == 0)
        #expect(binary.output == audit.standard)
    }

    @Test(
        "--since takes durations and UTC times and refuses anything else",
        arguments: [
            ("90s", ServerCommand.AuditStart.ago(90)), ("30m", .ago(1800)), ("24h", .ago(86_400)),
            ("7d", .ago(604_800)),
            ("2026-12-01", .time(1_796_083_200)), ("2026-12-01T08:00:00Z", .time(1_796_112_000)),
        ])
    func since(_ text: String, _ expected: ServerCommand.AuditStart) throws {
        #expect(try ServerCommand.AuditStart(parsing: text) == expected)
    }

    @Test(
        "a bad --since is a usage error", arguments: ["yesterday", "5w", "-1h", "2026-13-01", "2026-12-01 08:00", "h"])
    func badSince(_ text: String) {
        let output = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["audit", "--since", text, "--config", "/dev/null"], environment: [:], output: output.output)
                == 64)
        #expect(output.error.hasPrefix("keyauth-server: --since: expected a duration"))
    }
}
