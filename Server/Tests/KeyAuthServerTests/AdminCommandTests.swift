import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The admin commands of the built `keyauth-server`, on SQLite and on PostgreSQL.
@Suite("keyauth-server admin commands", .serialized, .timeLimit(.minutes(10)))
struct AdminCommandTests {
    /// A key ID made of `bytes` padded to 32 bytes: key IDs sharing their first 6 bytes share
    /// their first 8 characters.
    private static func kid(_ bytes: [UInt8]) -> String {
        Base64URL.encode(bytes + [UInt8](repeating: 7, count: 32 - bytes.count))
    }

    private static func device(_ kid: String, _ user: String, _ name: String, _ status: DeviceStatus.Stored)
        -> DeviceRecord
    {
        DeviceRecord(
            kid: kid, user: user, name: name, publicKeyPEM: "unused", status: status, createdAt: ServerClock.now())
    }

    private func run(_ arguments: [String], _ database: String) throws -> (status: Int32, output: String, error: String)
    {
        try KeyAuthServerProcess.runCommand(arguments + ["--db", database, "--config", "/dev/null"])
    }

    @Test("devices filters, approve and revoke by prefix, users, codes, delete-user and audit work on SQLite")
    func sqlite() throws {
        let environment = TestEnvironment()
        try adminCommands(environment.databasePath)
    }

    @Test(
        "devices filters, approve and revoke by prefix, users, codes, delete-user and audit work on PostgreSQL",
        .enabled(
            if: PostgresTestServer.url != nil,
            "KEYAUTH_TEST_POSTGRES_URL is not set; run `eval \"$(sudo .ci/postgres.sh)\"` first"))
    func postgres() throws {
        let database = try PostgresTestServer.makeDatabase(url: try #require(PostgresTestServer.url))
        defer { database.destroy() }
        try adminCommands(try #require(database.url))
    }

    private func adminCommands(_ location: String) throws {
        let storage = try StorageFactory.open(location)
        defer { storage.close() }
        let aliceLaptop = Self.kid([1, 2, 3, 4, 5, 6, 1])
        let alicePhone = Self.kid([1, 2, 3, 4, 5, 6, 2])
        let aliceTablet = Self.kid([1, 2, 3, 4, 5, 6, 3])
        let bobDesk = Self.kid([9, 9, 9, 9, 9, 9, 9])
        for device in [
            Self.device(aliceLaptop, "alice", "alice laptop", .active),
            Self.device(alicePhone, "alice", "phone", .pending),
            Self.device(aliceTablet, "alice", "tablet", .pending),
            Self.device(bobDesk, "bob", "desk", .active),
        ] {
            #expect(try storage.insertDevice(device))
        }

        // enroll: the code alone on standard output.
        let enroll = try run(["enroll", "bob"], location)
        #expect(enroll.status == 0)
        let code = enroll.output.trimmingCharacters(in: .newlines)
        #expect(enroll.output == code + "\n")
        #expect(code.count == 24)
        #expect(
            enroll.error
                == "keyauth-server: made a one-time enrollment code for bob, valid 15 minutes; it is the line on "
                + "standard output, for `keyauth register --user bob --enrollment-code CODE`\n")

        // devices: filters, the name last even with spaces, JSON.
        let pending = try run(["devices", "--user", "alice", "--status", "pending"], location)
        #expect(pending.status == 0)
        let rows = pending.output.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(rows.first == ["KID", "USER", "STATUS", "TIER", "CREATED", "LAST_LOGIN", "NAME"])
        #expect(Set(rows.dropFirst().map { $0[0] }) == [alicePhone, aliceTablet])
        #expect(
            rows.dropFirst().allSatisfy {
                $0[1] == "alice" && $0[2] == "pending" && $0[3] == "software" && $0[5] == "-"
            })
        let all = try run(["devices"], location)
        #expect(all.output.contains("  alice laptop\n"))
        let json = try run(["devices", "--json"], location)
        let listed = try #require(try JSONValue(parsing: json.output).arrayValue)
        #expect(listed.count == 4)
        #expect(listed.first?["kid"] == .string(aliceLaptop))
        #expect(listed.first?["last_login_at"] == .null)
        #expect(try run(["devices", "--status", "lost"], location).status == 64)

        // approve and revoke by prefix: too short, ambiguous (listing the matches), unknown, unique.
        let short = try run(["approve", String(alicePhone.prefix(7))], location)
        #expect(short.status == 64)
        #expect(short.error.contains("at least 8 characters"))
        let ambiguous = try run(["approve", String(alicePhone.prefix(8))], location)
        #expect(ambiguous.status == 64)
        #expect(ambiguous.error.contains("matches 3 devices"))
        for kid in [aliceLaptop, alicePhone, aliceTablet] { #expect(ambiguous.error.contains(kid)) }
        let unknown = try run(["revoke", "zzzzzzzzzz"], location)
        #expect(unknown.error == "keyauth-server: no device zzzzzzzzzz\n")
        #expect(unknown.status == 1)
        let approved = try run(["approve", String(alicePhone.prefix(10))], location)
        #expect(approved.output == "approved \(alicePhone) (alice)\n")
        #expect(try storage.device(kid: alicePhone)?.status == .active)
        #expect(try run(["approve", alicePhone], location).output == "\(alicePhone) is already active\n")
        let revoked = try run(["revoke", String(bobDesk.prefix(8))], location)
        #expect(revoked.output == "revoked \(bobDesk) (bob)\n")
        #expect(try storage.device(kid: bobDesk)?.status == .revoked)
        let cannot = try run(["approve", bobDesk], location)
        #expect(cannot.status == 1)
        #expect(cannot.error.hasPrefix("keyauth-server: cannot approve \(bobDesk)"))

        // users.
        let users = try run(["users"], location).output.split(separator: "\n").map {
            $0.split(separator: " ").map(String.init)
        }
        #expect(users.count == 3)
        #expect(users.dropFirst().first == ["alice", "2", "1", "0", "0", "0", "-"])
        #expect(users.last == ["bob", "0", "0", "0", "0", "1", "-"])
        let usersJSON = try #require(try JSONValue(parsing: try run(["users", "--json"], location).output).arrayValue)
        #expect(
            usersJSON.first
                == .object([
                    "user": .string("alice"), "active": .integer(2), "pending": .integer(1), "expired": .integer(0),
                    "denied": .integer(0), "revoked": .integer(0), "last_login_at": .null,
                ]))

        // codes list and revoke.
        let codes = try run(["codes", "list"], location)
        let codeRows = codes.output.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(codeRows.count == 2)
        #expect(try codeRows.last?[0] == Hex.encode(CryptoPrimitives.sha256(Array(code.utf8)).prefix(4)))
        #expect(codeRows.last?[1] == "bob")
        #expect(!codes.output.contains(code))
        let codesJSON = try #require(
            try JSONValue(parsing: try run(["codes", "list", "--json"], location).output).arrayValue)
        #expect(codesJSON.map { $0["user"] } == [.string("bob")])
        #expect(codesJSON.first?["id"] == .string(codeRows.last?[0] ?? ""))
        #expect(try run(["codes", "revoke", "bob"], location).output == "revoked 1 enrollment codes of bob\n")
        #expect(try run(["codes", "list"], location).output == "ID  USER  EXPIRES\n")
        // Nothing to match: exit 1 and one line, as delete-user of an unknown user below.
        let noCodes = try run(["codes", "revoke", "bob"], location)
        #expect(noCodes.status == 1)
        #expect(noCodes.error == "keyauth-server: no unused enrollment codes for a user named bob\n")

        // delete-user: every device revoked, then nothing of the user left.
        #expect(try run(["enroll", "alice"], location).status == 0)
        let deleted = try run(["delete-user", "alice"], location)
        #expect(deleted.output == "deleted alice: 3 devices, 1 enrollment codes\n")
        #expect(try storage.devices(user: "alice").isEmpty)
        #expect(try storage.enrollmentCodes(usableAt: 0).allSatisfy { $0.user != "alice" })
        let again = try run(["delete-user", "alice"], location)
        #expect(again.error == "keyauth-server: no user named alice\n")
        #expect(again.status == 1)

        // The audit trail has every change, in order.
        let actions = try AuditTrail(storage: storage).events(since: 0).map {
            "\($0.action) \($0.actor) \($0.user ?? "-") \($0.subject ?? "-")"
        }
        #expect(
            actions == [
                "enroll admin bob -", "approve admin alice \(alicePhone)", "revoke admin bob \(bobDesk)",
                "revoke-codes admin bob -", "enroll admin alice -", "revoke admin alice \(aliceLaptop)",
                "revoke admin alice \(alicePhone)", "deny admin alice \(aliceTablet)", "delete-user admin alice -",
            ])
    }
}
