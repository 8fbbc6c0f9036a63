import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// One storage contract, run against SQLite and PostgreSQL.
///
/// Both implementations must behave identically: same return values, same ordering, same
/// status transitions, same purge counts. Every check below therefore runs on both, and the
/// PostgreSQL run is reported as skipped, never as passed, when `KEYAUTH_TEST_POSTGRES_URL` is
/// unset (`eval "$(sudo .ci/postgres.sh)"` sets it).
///
/// Serialized because the outage test stops the PostgreSQL server: nothing else of this suite
/// may run against it meanwhile. The concurrency checks spawn their own threads.
@Suite("Server storage on SQLite and PostgreSQL", .serialized, .timeLimit(.minutes(10)))
struct StorageContractTests {
    @Test("SQLite storage keeps the contract", arguments: StorageCheck.all)
    func sqlite(_ check: StorageCheck) throws {
        try check.run(on: .sqlite)
    }

    @Test(
        "PostgreSQL storage keeps the contract",
        .enabled(
            if: StorageContractBackend.postgres != nil,
            "KEYAUTH_TEST_POSTGRES_URL is not set; run `eval \"$(sudo .ci/postgres.sh)\"` first"),
        arguments: StorageCheck.all)
    func postgres(_ check: StorageCheck) throws {
        let backend = try #require(StorageContractBackend.postgres)
        try check.run(on: backend)
    }
}

/// One named check of the storage contract, run on a fresh database.
struct StorageCheck: Sendable, CustomTestStringConvertible {
    let name: String
    let body: @Sendable (StorageContractDatabase) throws -> Void

    var testDescription: String { name }

    init(_ name: String, _ body: @escaping @Sendable (StorageContractDatabase) throws -> Void) {
        self.name = name
        self.body = body
    }

    func run(on backend: StorageContractBackend) throws {
        let database = try backend.makeDatabase()
        defer { database.destroy() }
        try body(database)
    }

    static let all: [StorageCheck] =
        [
            StorageCheck(
                "has a driver that binds $n by number and reads every value type back", StorageContract.driverRoundTrips
            ),
            StorageCheck("inserts a device once and reads every field back", StorageContract.insertsDevices),
            StorageCheck(
                "lets exactly one of many concurrent servers store the first signing key",
                StorageContract.insertsOnlyOneFirstSigningKey),
            StorageCheck(
                "lets exactly one of many concurrent servers store an RS256 key for ID tokens",
                StorageContract.insertsOnlyOneIDTokenKey),
            StorageCheck("lists devices oldest first, all devices by user in byte order", StorageContract.listsDevices),
            StorageCheck("knows whether a user has an active device", StorageContract.findsActiveDevices),
            StorageCheck("knows which states a user's devices are in", StorageContract.findsDeviceStatuses),
            StorageCheck(
                "inserts a first device only for an unknown user, a pending one only below the cap",
                StorageContract.insertsUnderRules),
            StorageCheck(
                "uses a device's one-time code up with its insert, and inserts nothing when the code is not usable",
                StorageContract.insertsWithCodes),
            StorageCheck(
                "never lets concurrent pending registrations pass the cap", StorageContract.racesPendingCap),
            StorageCheck(
                "gives an unknown user's name to exactly one of many concurrent first devices",
                StorageContract.racesFirstDevices),
            StorageCheck("lists a user's devices page by page after a position", StorageContract.pagesDevices),
            StorageCheck(
                "purges expired pending and old denied devices, never active or revoked ones",
                StorageContract.purgesDevices),
            StorageCheck("upgrades a version-1 database, keeping its devices", StorageContract.upgradesVersionOne),
            StorageCheck(
                "upgrades a version-2 database as the previous release left it, keeping every table",
                StorageContract.upgradesVersionTwo),
            StorageCheck("changes a status only from the expected one", StorageContract.updatesStatus),
            StorageCheck("records logins", StorageContract.recordsLogins),
            StorageCheck("claims a jti once per key and purges expired ones", StorageContract.claimsJTIs),
            StorageCheck(
                "purges more expired jtis than one chunk, all of them and only them", StorageContract.purgesJTIsInChunks
            ),
            StorageCheck(
                "raises a replay snapshot row, never lowers it, and leaves the other rows",
                StorageContract.raisesSnapshotRows),
            StorageCheck("consumes an enrollment code once, by its user, before expiry", StorageContract.consumesCodes),
            StorageCheck("purges used and expired enrollment codes", StorageContract.purgesCodes),
            StorageCheck(
                "refuses a duplicate enrollment code as a query failure", StorageContract.refusesDuplicateCodes),
            StorageCheck("keeps signing keys oldest first, byte for byte", StorageContract.storesSigningKeys),
            StorageCheck(
                "keeps signing keys' algorithms and rotation dates, and retires them by wiping the key",
                StorageContract.rotatesSigningKeys),
            StorageCheck("passes the health check, then refuses every call once closed", StorageContract.closes),
            StorageCheck("lets one of many concurrent replays across instances win", StorageContract.racesReplays),
            StorageCheck("lets one of many concurrent uses of a code win", StorageContract.racesEnrollmentCodes),
            StorageCheck("settles concurrent status changes with one winner", StorageContract.racesStatusChanges),
            StorageCheck("registers a contested key for exactly one caller", StorageContract.racesRegistrations),
            StorageCheck("shares signing keys between instances", StorageContract.sharesSigningKeys),
            StorageCheck("migrates once when several instances start at once", StorageContract.migratesConcurrently),
            StorageCheck("keeps everything across reopening", StorageContract.survivesReopening),
            StorageCheck("refuses a schema newer than it knows", StorageContract.refusesNewerSchema),
            StorageCheck(
                "keeps audit events in the order recorded, read from a time", StorageContract.keepsAuditEvents),
        ] + StorageContract.signInChecks + StorageContract.authorizationChecks + StorageContract.healthChecks
        + StorageContract.recoveryCodeChecks + StorageContract.approvalChecks + StorageContract.sshRevokedKeyChecks
}

/// The checks, written once for every backend.
enum StorageContract {
    static func device(
        _ kid: String, user: String = "alice", status: DeviceStatus.Stored = .pending, createdAt: Int64 = 1_000
    ) -> DeviceRecord {
        DeviceRecord(
            kid: kid, user: user, name: "\(user)'s \(kid) – ünïcode",
            publicKeyPEM: "-----BEGIN PUBLIC KEY-----\n\(kid)\n",
            status: status, createdAt: createdAt)
    }

    /// Calls `body` and returns the code of the ``StorageError`` it threw, or nil.
    static func errorCode(_ body: () throws(StorageError) -> Void) -> StorageError.Code? {
        do {
            try body()
            return nil
        } catch {
            return error.code
        }
    }

    static func driverRoundTrips(_ database: StorageContractDatabase) throws {
        let connection = try database.connect()
        // Out of order and repeated, as `updateStatus` writes them.
        let bytes = (0...255).map { UInt8($0) }
        let values: [SQLValue] = [.text("ünï\u{1}"), .integer(Int64.min), .blob(bytes), .null, .integer(-300)]
        let row = try connection.execute(
            "SELECT $3, $2, $1, $2, $4, $5, CAST(-7 AS \(connection.dialect.integer)), 'x'", values
        ).firstRow
        #expect(
            row?.values == [
                .blob(bytes), .integer(Int64.min), .text("ünï\u{1}"), .integer(Int64.min), .null, .integer(-300),
                .integer(-7), .text("x"),
            ])
        #expect(row?.blob(0) == bytes && row?.integer(1) == Int64.min && row?.text(2) == "ünï\u{1}")
        // Text is bound whole: a NUL inside is kept (SQLite) or refused (PostgreSQL), never an end.
        if connection.dialect == .sqlite {
            let nul = try connection.execute("SELECT $1, length(CAST($1 AS BLOB))", [.text("a\u{0}b")]).firstRow
            #expect(nul?.values == [.text("a\u{0}b"), .integer(3)])
        } else {
            #expect(
                errorCode { () throws(StorageError) in _ = try connection.execute("SELECT $1", [.text("a\u{0}b")]) }
                    == .queryFailed)
            // A locked table or a runaway statement costs a request a 503, not a thread for good.
            #expect(try connection.execute("SHOW lock_timeout").firstRow?.text(0) == "10s")
            #expect(try connection.execute("SHOW statement_timeout").firstRow?.text(0) == "30s")
        }
        // Strict accessors: a column of another type reads as nil.
        #expect(row?.text(1) == nil && row?.integer(2) == nil && row?.blob(2) == nil && row?.integer(4) == nil)
        // A value the statement needs but was not given is an error, not NULL (PostgreSQL calls
        // it a protocol violation, class 08, like a broken connection).
        #expect(errorCode { () throws(StorageError) in _ = try connection.execute("SELECT $1, $2", [.null]) } != nil)

        // Changed rows count writes only: a query after an update reports 0.
        try connection.execute("CREATE TABLE driver_check (id \(connection.dialect.integer) PRIMARY KEY, note TEXT)")
        #expect(try connection.execute("INSERT INTO driver_check VALUES (1, 'a'), (2, 'b')").affectedRowCount == 2)
        #expect(try connection.execute("UPDATE driver_check SET note = 'c'").affectedRowCount == 2)
        let read = try connection.execute("SELECT id, note FROM driver_check ORDER BY id")
        #expect(read.affectedRowCount == 0)
        #expect(read.rows.map(\.values) == [[.integer(1), .text("c")], [.integer(2), .text("c")]])
        #expect(try connection.execute("DELETE FROM driver_check WHERE id = $1", [.integer(2)]).affectedRowCount == 1)

        // A transaction inside a transaction is a savepoint: its failure undoes only its own work.
        try connection.transaction { () throws(StorageError) in
            try connection.execute("INSERT INTO driver_check VALUES (3, 'kept')")
            #expect(
                errorCode { () throws(StorageError) in
                    try connection.transaction { () throws(StorageError) in
                        try connection.execute("INSERT INTO driver_check VALUES (4, 'undone')")
                        try connection.execute("INSERT INTO driver_check VALUES (3, 'duplicate')")
                    }
                } == .queryFailed)
        }
        #expect(!connection.isInTransaction)
        #expect(try connection.query("SELECT id FROM driver_check ORDER BY id") { $0.integer(0) } == [1, 3])
    }

    static func insertsDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        var full = device("kid-full", status: .active)
        full.approvedAt = 1_001
        full.revokedAt = 1_002
        full.lastLoginAt = 1_003
        full.registeredFrom = "2001:db8::7"
        full.tier = .attested
        #expect(try storage.insertDevice(full))
        #expect(try storage.device(kid: "kid-full") == full)

        let bare = device("kid-bare")
        #expect(try storage.insertDevice(bare))
        #expect(try storage.device(kid: "kid-bare") == bare)
        #expect(try storage.device(kid: "kid-bare")?.tier == .software)
        var unverified = device("kid-tpm")
        unverified.tier = .tpmUnverified
        #expect(try storage.insertDevice(unverified))
        #expect(try storage.device(kid: "kid-tpm")?.tier == .tpmUnverified)

        // The same kid again, by anyone, changes nothing.
        #expect(try !storage.insertDevice(device("kid-full", user: "mallory", status: .pending)))
        #expect(try storage.device(kid: "kid-full") == full)
        #expect(try storage.device(kid: "kid-unknown") == nil)
        // Lookups are exact: no case folding, no prefix match.
        #expect(try storage.device(kid: "KID-FULL") == nil)
        #expect(try storage.device(kid: "kid-ful") == nil)
    }

    static func listsDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let records = [
            device("kid-c", user: "bob", createdAt: 30),
            device("kid-b", user: "bob", createdAt: 10),
            device("kid-a", user: "bob", createdAt: 30),
            device("kid-d", user: "alice", createdAt: 50),
            device("kid-e", user: "Bob", createdAt: 60),
            device("kid-f", user: "émile", createdAt: 5),
            device("kid-g", user: "zoe", createdAt: 1),
        ]
        for record in records {
            #expect(try storage.insertDevice(record))
        }
        // Oldest first; equal times by kid.
        #expect(try storage.devices(user: "bob").map(\.kid) == ["kid-b", "kid-a", "kid-c"])
        #expect(try storage.devices(user: "nobody").isEmpty)
        #expect(try storage.devices(user: "BOB").isEmpty)
        // By user in UTF-8 byte order (upper case before lower, non-ASCII last), then age.
        #expect(
            try storage.allDevices().map(\.kid) == ["kid-e", "kid-d", "kid-b", "kid-a", "kid-c", "kid-g", "kid-f"])
        #expect(try storage.allDevices().map(\.user) == ["Bob", "alice", "bob", "bob", "bob", "zoe", "émile"])
    }

    static func findsActiveDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try !storage.hasActiveDevice(user: "alice"))
        #expect(try storage.insertDevice(device("kid-1", status: .pending)))
        #expect(try storage.insertDevice(device("kid-2", status: .denied)))
        #expect(try storage.insertDevice(device("kid-3", user: "bob", status: .active)))
        #expect(try !storage.hasActiveDevice(user: "alice"))
        #expect(try storage.hasActiveDevice(user: "bob"))
        #expect(try storage.updateStatus(kid: "kid-1", from: .pending, to: .active, at: 2_000))
        #expect(try storage.hasActiveDevice(user: "alice"))
        #expect(try storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 3_000))
        #expect(try !storage.hasActiveDevice(user: "alice"))
    }

    static func findsDeviceStatuses(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.deviceStatuses(user: "alice").isEmpty)
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.insertDevice(device("kid-2", status: .pending)))
        #expect(try storage.insertDevice(device("kid-3", status: .pending)))
        #expect(try storage.insertDevice(device("kid-4", user: "bob", status: .denied)))
        #expect(try storage.deviceStatuses(user: "alice") == [.active, .pending])
        #expect(try storage.deviceStatuses(user: "bob") == [.denied])
        #expect(try storage.deviceStatuses(user: "Alice").isEmpty)
        // A user whose only device was revoked is still known.
        #expect(try storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 2_000))
        #expect(try storage.updateStatus(kid: "kid-2", from: .pending, to: .denied, at: 2_000))
        #expect(try storage.updateStatus(kid: "kid-3", from: .pending, to: .denied, at: 2_000))
        #expect(try storage.deviceStatuses(user: "alice") == [.revoked, .denied])
    }

    static func insertsUnderRules(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        // A first device only while the user has no record at all.
        var first = device("kid-first", status: .active)
        first.registeredFrom = "192.0.2.1"
        #expect(try storage.insertDevice(first, rule: .userHasNoDevices) == .inserted)
        #expect(try storage.device(kid: "kid-first") == first)
        #expect(
            try storage.insertDevice(device("kid-second", status: .active), rule: .userHasNoDevices) == .userHasDevices)
        #expect(try storage.updateStatus(kid: "kid-first", from: .active, to: .revoked, at: 1_100))
        #expect(
            try storage.insertDevice(device("kid-second", status: .active), rule: .userHasNoDevices) == .userHasDevices)
        #expect(try storage.device(kid: "kid-second") == nil)
        // A taken kid wins over every rule, whoever owns it.
        #expect(try storage.insertDevice(device("kid-first", user: "bob"), rule: .userHasNoDevices) == .kidTaken)
        #expect(try storage.insertDevice(device("kid-first"), rule: .unconditional) == .kidTaken)

        // The cap counts only pending devices created after `createdAfter`.
        let rule = DeviceInsertRule.pendingBelow(limit: 3, createdAfter: 1_000)
        #expect(
            try storage.insertDevice(device("kid-old", status: .pending, createdAt: 1_000), rule: rule) == .inserted)
        #expect(
            try storage.insertDevice(device("kid-denied", status: .denied, createdAt: 1_500), rule: rule) == .inserted)
        for index in 0..<3 {
            let kid = "kid-p\(index)"
            #expect(try storage.insertDevice(device(kid, createdAt: 2_000 - Int64(index)), rule: rule) == .inserted)
        }
        #expect(
            try storage.insertDevice(device("kid-p3", createdAt: 2_100), rule: rule)
                == .pendingLimitReached(oldestCreatedAt: 1_998))
        #expect(try storage.device(kid: "kid-p3") == nil)
        // Another user's cap is their own; a device that is no longer pending frees a place.
        #expect(try storage.insertDevice(device("kid-bob", user: "bob", createdAt: 2_100), rule: rule) == .inserted)
        #expect(try storage.updateStatus(kid: "kid-p1", from: .pending, to: .active, at: 2_100))
        #expect(try storage.insertDevice(device("kid-p3", createdAt: 2_100), rule: rule) == .inserted)
        #expect(
            try storage.insertDevice(device("kid-p4", createdAt: 2_100), rule: rule)
                == .pendingLimitReached(oldestCreatedAt: 1_998))
        #expect(try storage.insertDevice(device("kid-p0", createdAt: 2_100), rule: rule) == .kidTaken)
    }

    static func racesPendingCap(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        let rule = DeviceInsertRule.pendingBelow(limit: 10, createdAfter: 500)
        for round in 0..<3 {
            let user = "user-\(round)"
            for index in 0..<9 {
                #expect(
                    try first.insertDevice(device("kid-\(round)-\(index)", user: user, createdAt: 1_000 + Int64(index)))
                )
            }
            // 24 registrations at 9 of 10: exactly one gets the last place.
            let outcomes = runConcurrently(24) { (index: Int) throws(StorageError) -> DeviceInsertion in
                try (index.isMultiple(of: 2) ? first : second).insertDevice(
                    device("kid-\(round)-new-\(index)", user: user, createdAt: 2_000), rule: rule)
            }
            let values = try outcomes.map { try $0.get() }
            #expect(values.filter { $0 == .inserted }.count == 1, "round \(round)")
            #expect(values.filter { $0 == .pendingLimitReached(oldestCreatedAt: 1_000) }.count == 23, "round \(round)")
            #expect(try second.devices(user: user).filter { $0.status == .pending }.count == 10, "round \(round)")
        }
    }

    static func racesFirstDevices(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        let outcomes = runConcurrently(24) { (index: Int) throws(StorageError) -> DeviceInsertion in
            try (index.isMultiple(of: 2) ? first : second).insertDevice(
                device("kid-\(index)", user: "carol", status: .active), rule: .userHasNoDevices)
        }
        let values = try outcomes.map { try $0.get() }
        #expect(values.filter { $0 == .inserted }.count == 1)
        #expect(values.filter { $0 == .userHasDevices }.count == 23)
        #expect(try first.devices(user: "carol").count == 1)
    }

    static func pagesDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        // 25 devices in 5 seconds, 5 a second, inserted out of order; and another user's.
        let kids = (0..<25).map { "kid-\(String(format: "%02d", $0))" }
        for (index, kid) in kids.enumerated().reversed() {
            #expect(try storage.insertDevice(device(kid, createdAt: 100 + Int64(index / 5))))
        }
        #expect(try storage.insertDevice(device("kid-bob", user: "bob", createdAt: 100)))

        var seen: [String] = []
        var position = DeviceListPosition.start
        while true {
            let page = try storage.devices(user: "alice", after: position, limit: 7)
            #expect(page.count <= 7)
            seen += page.map(\.kid)
            guard let last = page.last else { break }
            position = last.listPosition
        }
        #expect(seen == kids)
        // Resuming inside a second continues by kid; a position between kids works as well.
        let middle = try storage.devices(
            user: "alice", after: DeviceListPosition(createdAt: 102, kid: "kid-11"), limit: 3)
        #expect(middle.map(\.kid) == ["kid-12", "kid-13", "kid-14"])
        let between = try storage.devices(
            user: "alice", after: DeviceListPosition(createdAt: 102, kid: "kid-11x"), limit: 2)
        #expect(between.map(\.kid) == ["kid-12", "kid-13"])
        #expect(
            try storage.devices(user: "alice", after: DeviceListPosition(createdAt: 104, kid: "kid-24"), limit: 5)
                .isEmpty)
        #expect(try storage.devices(user: "bob", after: .start, limit: 100).map(\.kid) == ["kid-bob"])
        #expect(try storage.devices(user: "alice").count == 25)
    }

    static func purgesDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        for (kid, status, createdAt) in [
            ("kid-pending-old", DeviceStatus.Stored.pending, Int64(100)),
            ("kid-pending-edge", .pending, 200), ("kid-pending-new", .pending, 300),
            ("kid-active-old", .active, 100), ("kid-revoked-old", .revoked, 100),
            ("kid-denied-old", .pending, 100), ("kid-denied-new", .pending, 100),
        ] {
            #expect(try storage.insertDevice(device(kid, status: status, createdAt: createdAt)))
        }
        #expect(try storage.updateStatus(kid: "kid-denied-old", from: .pending, to: .denied, at: 1_000))
        #expect(try storage.updateStatus(kid: "kid-denied-new", from: .pending, to: .denied, at: 2_000))
        #expect(try storage.updateStatus(kid: "kid-revoked-old", from: .revoked, to: .revoked, at: 100))

        // Strictly before each bound.
        #expect(try storage.purgeDevices(pendingCreatedBefore: 200, deniedBefore: 1_000) == 1)
        #expect(try storage.device(kid: "kid-pending-old") == nil)
        #expect(try storage.purgeDevices(pendingCreatedBefore: 201, deniedBefore: 1_001) == 2)
        #expect(try storage.purgeDevices(pendingCreatedBefore: 201, deniedBefore: 1_001) == 0)
        let left = try storage.devices(user: "alice").map(\.kid)
        #expect(left == ["kid-active-old", "kid-denied-new", "kid-revoked-old", "kid-pending-new"])
        // However old, active and revoked devices stay.
        #expect(try storage.purgeDevices(pendingCreatedBefore: 10_000, deniedBefore: 10_000) == 2)
        #expect(try storage.devices(user: "alice").map(\.kid) == ["kid-active-old", "kid-revoked-old"])
    }

    static func upgradesVersionOne(_ database: StorageContractDatabase) throws {
        try database.execute("CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        for statement in database.firstMigration {
            try database.execute(statement)
        }
        try database.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (1, 0)")
        try database.execute(
            "INSERT INTO devices (kid, \(database.userColumn), name, public_key_pem, status, created_at) "
                + "VALUES ('kid-old', 'alice', 'old', 'pem', 'active', 5)")
        let storage = try database.open()
        defer { storage.close() }
        try storage.healthCheck()
        let old = try storage.device(kid: "kid-old")
        #expect(old?.status == .active)
        #expect(old?.user == "alice")
        #expect(old != nil && old?.registeredFrom == nil)
        #expect(old?.tier == .software, "every device of before tiers was registered without attestation")
        var new = device("kid-new", status: .pending, createdAt: 10)
        new.registeredFrom = "198.51.100.4"
        #expect(try storage.insertDevice(new))
        #expect(try storage.devices(user: "alice") == [old, new].compactMap { $0 })
    }

    static func upgradesVersionTwo(_ database: StorageContractDatabase) throws {
        try database.execute("CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        for statement in database.versionTwoSchema {
            try database.execute(statement)
        }
        try database.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (1, 0), (2, 0)")
        let user = database.userColumn
        try database.execute(
            "INSERT INTO devices (kid, \(user), name, public_key_pem, status, created_at, last_login_at, registered_from) "
                + "VALUES ('kid-old', 'alice', 'old', 'pem', 'active', 5, 7, '192.0.2.9')")
        try database.execute(
            "INSERT INTO devices (kid, \(user), name, public_key_pem, status, created_at) "
                + "VALUES ('kid-pending', 'alice', 'new', 'pem', 'pending', 6)")
        let code = try Array(CryptoPrimitives.sha256(Array("old-code".utf8)))
        let codeHex = code.map { String(format: "%02x", $0) }.joined()
        try database.execute(
            "INSERT INTO enrollment_codes (code_hash, \(user), expires_at) VALUES (\(database.hexBlob(codeHex)), 'alice', 1000)"
        )
        try database.execute("INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ('kid-old', 'jti-old', 1000)")
        try database.execute(
            "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES ('key-old', \(database.hexBlob("00ff10")), 1)"
        )

        let storage = try database.open()
        defer { storage.close() }
        try storage.healthCheck()
        var old = device("kid-old", status: .active, createdAt: 5)
        old.name = "old"
        old.publicKeyPEM = "pem"
        old.lastLoginAt = 7
        old.registeredFrom = "192.0.2.9"
        #expect(try storage.device(kid: "kid-old") == old)
        #expect(try storage.devices(user: "alice").map(\.kid) == ["kid-old", "kid-pending"])
        #expect(try storage.deviceStatuses(user: "alice") == [.active, .pending])
        #expect(try storage.insertDevice(device("kid-new"), rule: .userHasNoDevices) == .userHasDevices)
        #expect(try storage.allDevices().map(\.user) == ["alice", "alice"])
        // The code stays its user's, under the column's new name.
        #expect(try !storage.consumeEnrollmentCode(hash: code, user: "bob", now: 10))
        #expect(try storage.consumeEnrollmentCode(hash: code, user: "alice", now: 10))
        #expect(try !storage.claimJTI(keyID: "kid-old", jti: "jti-old", expiresAt: 1000))
        #expect(try storage.signingKeys().map(\.privatePEM) == [[0x00, 0xff, 0x10]])
        // A key from before rotation existed is RS256 and signed from its creation.
        let migrated = try #require(try storage.signingKeys().first)
        #expect(migrated.algorithm == .rs256 && migrated.activeFrom == 1 && migrated.retiredAt == nil)
        // One logical schema: both tables' user column is `user_name` now, on either backend.
        try database.execute("SELECT devices.user_name, enrollment_codes.user_name FROM devices, enrollment_codes")
    }

    static func updatesStatus(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1")))
        #expect(try storage.insertDevice(device("kid-2")))

        // Wrong expectation or unknown device: false, nothing changes.
        #expect(try !storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 1_500))
        #expect(try !storage.updateStatus(kid: "kid-unknown", from: .pending, to: .active, at: 1_500))
        #expect(try storage.device(kid: "kid-1") == device("kid-1"))

        // Approval stamps approved_at.
        #expect(try storage.updateStatus(kid: "kid-1", from: .pending, to: .active, at: 2_000))
        var expected = device("kid-1", status: .active)
        expected.approvedAt = 2_000
        #expect(try storage.device(kid: "kid-1") == expected)

        // Revocation stamps revoked_at and keeps approved_at.
        #expect(try storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 3_000))
        expected.status = .revoked
        expected.revokedAt = 3_000
        #expect(try storage.device(kid: "kid-1") == expected)

        // A late approval cannot undo the revocation.
        #expect(try !storage.updateStatus(kid: "kid-1", from: .pending, to: .active, at: 4_000))
        #expect(try !storage.updateStatus(kid: "kid-1", from: .active, to: .active, at: 4_000))
        #expect(try storage.device(kid: "kid-1") == expected)

        // Denial stamps revoked_at only.
        #expect(try storage.updateStatus(kid: "kid-2", from: .pending, to: .denied, at: 5_000))
        var denied = device("kid-2", status: .denied)
        denied.revokedAt = 5_000
        #expect(try storage.device(kid: "kid-2") == denied)

        // A move to pending stamps nothing.
        #expect(try storage.updateStatus(kid: "kid-2", from: .denied, to: .pending, at: 6_000))
        denied.status = .pending
        #expect(try storage.device(kid: "kid-2") == denied)
    }

    static func recordsLogins(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        try storage.recordLogin(kid: "kid-1", at: 7_000)
        #expect(try storage.device(kid: "kid-1")?.lastLoginAt == 7_000)
        try storage.recordLogin(kid: "kid-1", at: 8_000)
        #expect(try storage.device(kid: "kid-1")?.lastLoginAt == 8_000)
        // An unknown device is not an error.
        try storage.recordLogin(kid: "kid-unknown", at: 9_000)
        #expect(try storage.device(kid: "kid-unknown") == nil)
    }

    static func claimsJTIs(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.claimJTI(keyID: "kid-1", jti: "j1", expiresAt: 100))
        #expect(try !storage.claimJTI(keyID: "kid-1", jti: "j1", expiresAt: 500))
        // Per key: the same jti from another key is another assertion.
        #expect(try storage.claimJTI(keyID: "kid-2", jti: "j1", expiresAt: 100))
        #expect(try storage.claimJTI(keyID: "kid-1", jti: "j2", expiresAt: 200))
        #expect(try storage.claimJTI(keyID: "kid-1", jti: "J1", expiresAt: 300))
        // The lookup reads without claiming, and matches key and jti exactly.
        #expect(try storage.isJTIClaimed(keyID: "kid-1", jti: "j2"))
        #expect(try !storage.isJTIClaimed(keyID: "kid-1", jti: "j3"))
        #expect(try !storage.isJTIClaimed(keyID: "kid-2", jti: "j2"))
        #expect(try !storage.isJTIClaimed(keyID: "kid-1", jti: "J2"))

        // Strictly before `now`: an entry expiring at `now` stays.
        #expect(try storage.purgeExpiredJTIs(now: 100) == 0)
        #expect(try storage.purgeExpiredJTIs(now: 101) == 2)
        #expect(try storage.purgeExpiredJTIs(now: 101) == 0)
        #expect(try !storage.isJTIClaimed(keyID: "kid-1", jti: "j1"))
        #expect(try !storage.claimJTI(keyID: "kid-1", jti: "j2", expiresAt: 200))
        // Once forgotten, a jti can be recorded again (its assertion has long expired).
        #expect(try storage.claimJTI(keyID: "kid-1", jti: "j1", expiresAt: 900))
        #expect(try storage.purgeExpiredJTIs(now: 10_000) == 3)
    }

    static func raisesSnapshotRows(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let running = ReplaySnapshotRow(name: "running", expiresAt: 9_000)
        try storage.replaceReplaySnapshot(with: ReplaySnapshot(markers: [running]))
        let lease = { try storage.replaySnapshot().first { $0.name == "lease" }?.expiresAt }
        try storage.raiseReplaySnapshotRow(ReplaySnapshotRow(name: "lease", expiresAt: 100))
        #expect(try lease() == 100, "added when missing")
        try storage.raiseReplaySnapshotRow(ReplaySnapshotRow(name: "lease", expiresAt: 150))
        #expect(try lease() == 150)
        try storage.raiseReplaySnapshotRow(ReplaySnapshotRow(name: "lease", expiresAt: 120))
        #expect(try lease() == 150, "never moved back")
        #expect(try storage.replaySnapshot().contains(running))
        // A snapshot row, not a claim: a memory cache taking over claims does not see it.
        #expect(try storage.claimedJTIs(expiringAfter: 0).isEmpty)
    }

    static func purgesJTIsInChunks(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let expired = SQLStorage.purgeChunkSize * 2 + 500
        try database.execute(
            """
            WITH RECURSIVE numbers (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM numbers WHERE n < \(expired - 1))
            INSERT INTO used_jtis (key_id, jti, expires_at) SELECT 'k', 'old-' || n, 100 FROM numbers
            """)
        #expect(try storage.claimJTI(keyID: "k", jti: "fresh", expiresAt: 10_000))
        #expect(try storage.purgeExpiredJTIs(now: 5_000) == expired)
        #expect(try storage.purgeExpiredJTIs(now: 5_000) == 0)
        #expect(try storage.claimJTI(keyID: "k", jti: "fresh", expiresAt: 10_000) == false)
        #expect(try storage.claimJTI(keyID: "k", jti: "old-0", expiresAt: 10_000))
    }

    static func insertsWithCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let hash = try Array(CryptoPrimitives.sha256(Array("code-1".utf8)))
        let typedOtherwise = try Array(CryptoPrimitives.sha256(Array("code-1 as typed".utf8)))
        try storage.insertEnrollmentCode(hash: hash, user: "alice", expiresAt: 5_000)
        let byCode = DeviceInsertRule.usingCode(.enrollment(hashes: [typedOtherwise, hash]))

        // Another user's code, or a key already registered: nothing inserted, the code kept.
        #expect(
            try storage.insertDevice(device("kid-bob", user: "bob", status: .active), rule: byCode) == .codeNotUsable)
        #expect(try storage.device(kid: "kid-bob") == nil)
        #expect(try storage.insertDevice(device("kid-taken", user: "carol"), rule: .unconditional) == .inserted)
        #expect(try storage.insertDevice(device("kid-taken", status: .active), rule: byCode) == .kidTaken)
        // The code in any of its forms: inserted, and the code used up with it.
        #expect(try storage.insertDevice(device("kid-1", status: .active), rule: byCode) == .inserted)
        #expect(try !storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 1_001))
        #expect(try storage.insertDevice(device("kid-2", status: .active), rule: byCode) == .codeNotUsable)
        #expect(try storage.device(kid: "kid-2") == nil)

        // A code the user's deletion took: nothing inserted for the deleted user.
        let daves = try Array(CryptoPrimitives.sha256(Array("code-dave".utf8)))
        try storage.insertEnrollmentCode(hash: daves, user: "dave", expiresAt: 5_000)
        _ = try storage.deleteUser("dave", listingSSHKeysUntil: 2_000)
        let deleted = DeviceInsertRule.usingCode(.enrollment(hashes: [daves]))
        #expect(
            try storage.insertDevice(device("kid-dave", user: "dave", status: .active), rule: deleted) == .codeNotUsable
        )
        #expect(try storage.devices(user: "dave").isEmpty)

        // A recovery code, by its row: once.
        let code = try oneRecoveryCode(for: "alice", in: storage)
        // Its notice goes in with the device, in one transaction, when the user has another
        // active device (alice's kid-1) to show it on; a refused insert leaves none.
        let recovery = DeviceInsertRule.usingCode(
            .recovery(code: code, notice: notice("kid-3", user: "alice"), audit: audit("kid-3", user: "alice")))
        #expect(
            try storage.insertDevice(device("kid-3", user: "bob", status: .active), rule: recovery) == .codeNotUsable)
        #expect(try storage.openSignInRequests(user: "bob", now: 1_000).isEmpty)
        #expect(try storage.openSignInRequests(user: "alice", now: 1_000).isEmpty)
        #expect(try storage.auditEvents(since: 0).isEmpty)
        #expect(try storage.insertDevice(device("kid-3", status: .active), rule: recovery) == .inserted)
        #expect(try storage.unusedRecoveryCodes(user: "alice").isEmpty)
        let notices = try storage.openSignInRequests(user: "alice", now: 1_000)
        #expect(notices.map(\.kind) == [.recovery] && notices.map(\.subject) == ["kid-3"])
        #expect(try storage.auditEvents(since: 0).map(\.subject) == ["kid-3"])
        // The codes left, counted in the insert's transaction.
        #expect(try storage.auditEvents(since: 0).map(\.detail) == ["device, from 192.0.2.9, 0 codes left"])
        #expect(try storage.insertDevice(device("kid-4", status: .active), rule: recovery) == .codeNotUsable)
        #expect(try storage.openSignInRequests(user: "alice", now: 1_000).count == 1)

        // A user with no other active device: nobody to tell, so no notice.
        let erins = try oneRecoveryCode(for: "erin", in: storage)
        let alone = DeviceInsertRule.usingCode(
            .recovery(code: erins, notice: notice("kid-erin", user: "erin"), audit: audit("kid-erin", user: "erin")))
        #expect(try storage.insertDevice(device("kid-erin", user: "erin", status: .active), rule: alone) == .inserted)
        #expect(try storage.openSignInRequests(user: "erin", now: 1_000).isEmpty)
    }

    /// Gives `user` a set of one recovery code, and returns its row.
    static func oneRecoveryCode(for user: String, in storage: any ServerStorage) throws -> RecoveryCodeRecord {
        let hash = try Array(CryptoPrimitives.sha256(Array("recovery-\(user)".utf8)))
        try storage.replaceRecoveryCodes(
            user: user,
            with: [
                RecoveryCodeRecord(
                    id: 0, user: user, salt: Array(repeating: 1, count: 16), hash: hash, iterations: 1, createdAt: 1_000
                )
            ])
        return try #require(try storage.unusedRecoveryCodes(user: user).first)
    }

    /// The audit entry of a device a recovery code enrolled, as the registration makes it.
    static func audit(_ kid: String, user: String) -> AuditEvent {
        AuditEvent(
            time: 1_000, action: .useRecoveryCode, actor: "device:" + kid, user: user, subject: kid,
            detail: "device, from 192.0.2.9")
    }

    /// The notice of a device a recovery code enrolled, as the registration makes it.
    static func notice(_ kid: String, user: String) -> SignInRequestRecord {
        SignInRequestRecord(
            id: "notice-" + kid, kind: .recovery, clientID: nil, user: user, bindingMessage: "00", scope: nil,
            requestedFrom: "192.0.2.9", createdAt: 1_000, expiresAt: 87_400, subject: kid)
    }

    static func consumesCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let hash = try Array(CryptoPrimitives.sha256(Array("code-1".utf8)))
        let other = try Array(CryptoPrimitives.sha256(Array("code-2".utf8)))
        try storage.insertEnrollmentCode(hash: hash, user: "alice", expiresAt: 1_000)
        try storage.insertEnrollmentCode(hash: other, user: "alice", expiresAt: 1_000)

        // Another user's attempt fails and leaves the code usable.
        #expect(try !storage.consumeEnrollmentCode(hash: hash, user: "mallory", now: 10))
        #expect(try !storage.consumeEnrollmentCode(hash: hash, user: "Alice", now: 10))
        #expect(try !storage.consumeEnrollmentCode(hash: Array(hash.reversed()), user: "alice", now: 10))
        #expect(try storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 10))
        #expect(try !storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 11))

        // Valid strictly before its expiry.
        #expect(try !storage.consumeEnrollmentCode(hash: other, user: "alice", now: 1_000))
        #expect(try storage.consumeEnrollmentCode(hash: other, user: "alice", now: 999))
    }

    static func purgesCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let codes = try (0..<4).map { try CryptoPrimitives.sha256(Array("code-\($0)".utf8)) }
        try storage.insertEnrollmentCode(hash: codes[0], user: "alice", expiresAt: 100)
        try storage.insertEnrollmentCode(hash: codes[1], user: "alice", expiresAt: 200)
        try storage.insertEnrollmentCode(hash: codes[2], user: "bob", expiresAt: 300)
        try storage.insertEnrollmentCode(hash: codes[3], user: "bob", expiresAt: 300)
        #expect(try storage.consumeEnrollmentCode(hash: codes[2], user: "bob", now: 50))

        // The used one, and those expired strictly before `now`.
        #expect(try storage.purgeExpiredEnrollmentCodes(now: 100) == 1)
        #expect(try storage.purgeExpiredEnrollmentCodes(now: 101) == 1)
        #expect(try storage.purgeExpiredEnrollmentCodes(now: 101) == 0)
        #expect(try storage.consumeEnrollmentCode(hash: codes[1], user: "alice", now: 101))
        #expect(try storage.purgeExpiredEnrollmentCodes(now: 0) == 1)
        #expect(try storage.consumeEnrollmentCode(hash: codes[3], user: "bob", now: 150))
    }

    static func refusesDuplicateCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let hash = try Array(CryptoPrimitives.sha256(Array("code".utf8)))
        try storage.insertEnrollmentCode(hash: hash, user: "alice", expiresAt: 100)
        #expect(
            errorCode { () throws(StorageError) in
                try storage.insertEnrollmentCode(hash: hash, user: "bob", expiresAt: 900)
            } == .queryFailed)
        #expect(try !storage.consumeEnrollmentCode(hash: hash, user: "bob", now: 10))
        #expect(try storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 10))
    }

    static func storesSigningKeys(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.signingKeys().isEmpty)
        // Every byte value, NUL included, must survive.
        let binary = (0...255).map { UInt8($0) } + Array("-----END PRIVATE KEY-----\n".utf8)
        #expect(try storage.insertSigningKey(kid: "key-b", privatePEM: binary, createdAt: 20))
        #expect(try storage.insertSigningKey(kid: "key-c", privatePEM: Array("pem-c".utf8), createdAt: 10))
        #expect(try storage.insertSigningKey(kid: "key-a", privatePEM: Array("pem-a".utf8), createdAt: 20))
        #expect(try storage.insertSigningKey(kid: "key-e", privatePEM: [], createdAt: 30))
        #expect(try !storage.insertSigningKey(kid: "key-b", privatePEM: Array("other".utf8), createdAt: 5))

        let keys = try storage.signingKeys()
        #expect(keys.map(\.kid) == ["key-c", "key-a", "key-b", "key-e"])
        #expect(keys.map(\.createdAt) == [10, 20, 20, 30])
        #expect(keys.map(\.privatePEM) == [Array("pem-c".utf8), Array("pem-a".utf8), binary, []])
    }

    static func rotatesSigningKeys(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let first = SigningKeyRecord(kid: "key-1", privatePEM: Array("pem-1".utf8), createdAt: 100)
        #expect(try storage.insertFirstSigningKey(first))
        // Made later but signing earlier than the rotation below: ordered by active_from.
        let next = SigningKeyRecord(
            kid: "key-2", privatePEM: Array("pem-2".utf8), createdAt: 200, algorithm: .es256, activeFrom: 800)
        let other = SigningKeyRecord(
            kid: "key-3", privatePEM: Array("pem-3".utf8), createdAt: 150, algorithm: .edDSA, activeFrom: 900)
        #expect(try storage.insertSigningKey(other))
        #expect(try storage.insertSigningKey(next))
        #expect(try !storage.insertFirstSigningKey(next))
        let keys = try storage.signingKeys()
        #expect(keys.map(\.kid) == ["key-1", "key-2", "key-3"])
        #expect(keys.map(\.algorithm) == [.rs256, .es256, .edDSA])
        #expect(keys.map(\.activeFrom) == [100, 800, 900])

        #expect(try storage.retireSigningKey(kid: "key-1", at: 2000))
        #expect(try !storage.retireSigningKey(kid: "key-1", at: 2001))
        #expect(try !storage.retireSigningKey(kid: "key-unknown", at: 2001))
        #expect(try storage.signingKeys().map(\.kid) == ["key-2", "key-3"])
        let all = try storage.signingKeys(includingRetired: true)
        #expect(all.map(\.kid) == ["key-1", "key-2", "key-3"])
        // The retired key's private key is gone from the store; its dates stay for `keys list`.
        #expect(all.first?.privatePEM == [])
        #expect(all.first?.retiredAt == 2000)
        #expect(all.first?.createdAt == 100)
        // A store with only retired keys is not empty: no second "first" key.
        #expect(try !storage.insertFirstSigningKey(SigningKeyRecord(kid: "key-4", privatePEM: [1], createdAt: 3000)))
    }

    static func closes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        try storage.healthCheck()
        #expect(try storage.insertDevice(device("kid-1")))
        storage.close()
        storage.close()
        #expect(errorCode { () throws(StorageError) in try storage.healthCheck() } == .closed)
        #expect(errorCode { () throws(StorageError) in _ = try storage.device(kid: "kid-1") } == .closed)
        #expect(errorCode { () throws(StorageError) in _ = try storage.insertDevice(device("kid-2")) } == .closed)
        #expect(
            errorCode { () throws(StorageError) in _ = try storage.claimJTI(keyID: "k", jti: "j", expiresAt: 1) }
                == .closed)
    }

    static func racesReplays(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        for round in 0..<5 {
            let outcomes = runConcurrently(24) { (index: Int) throws(StorageError) in
                try (index.isMultiple(of: 2) ? first : second).claimJTI(
                    keyID: "kid-1", jti: "jti-\(round)", expiresAt: 1_000)
            }
            let values = try outcomes.map { try $0.get() }
            #expect(values.filter { $0 }.count == 1, "round \(round)")
        }
    }

    static func racesEnrollmentCodes(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        for round in 0..<5 {
            let hash = try Array(CryptoPrimitives.sha256(Array("code-\(round)".utf8)))
            try first.insertEnrollmentCode(hash: hash, user: "alice", expiresAt: 1_000)
            let outcomes = runConcurrently(24) { (index: Int) throws(StorageError) in
                try (index.isMultiple(of: 2) ? first : second).consumeEnrollmentCode(
                    hash: hash, user: "alice", now: 10)
            }
            let values = try outcomes.map { try $0.get() }
            #expect(values.filter { $0 }.count == 1, "round \(round)")
        }
        #expect(try first.purgeExpiredEnrollmentCodes(now: 0) == 5)
    }

    static func racesStatusChanges(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        for round in 0..<5 {
            let kid = "kid-\(round)"
            #expect(try first.insertDevice(device(kid)))
            // Approvals and denials at once: exactly one wins and the record shows that one.
            let outcomes = runConcurrently(24) { (index: Int) throws(StorageError) -> DeviceStatus.Stored? in
                let target: DeviceStatus.Stored = index.isMultiple(of: 3) ? .denied : .active
                let storage = index.isMultiple(of: 2) ? first : second
                return try storage.updateStatus(kid: kid, from: .pending, to: target, at: Int64(100 + index))
                    ? target : nil
            }
            let winners = try outcomes.compactMap { try $0.get() }
            #expect(winners.count == 1, "round \(round)")
            let stored = try second.device(kid: kid)
            #expect(stored?.status == winners.first)
            if stored?.status == .active {
                #expect(stored?.approvedAt != nil && stored?.revokedAt == nil)
            } else {
                #expect(stored?.approvedAt == nil && stored?.revokedAt != nil)
            }
        }
        // Revocation racing a late approval of an already active device: revocation sticks.
        #expect(try first.insertDevice(device("kid-race", status: .active)))
        let outcomes = runConcurrently(16) { (index: Int) throws(StorageError) -> Bool in
            index == 0
                ? try first.updateStatus(kid: "kid-race", from: .active, to: .revoked, at: 500)
                : try second.updateStatus(kid: "kid-race", from: .pending, to: .active, at: 500)
        }
        #expect(try outcomes.map { try $0.get() } == [true] + Array(repeating: false, count: 15))
        #expect(try first.device(kid: "kid-race")?.status == .revoked)
    }

    static func racesRegistrations(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        let outcomes = runConcurrently(24) { (index: Int) throws(StorageError) -> Bool in
            try (index.isMultiple(of: 2) ? first : second).insertDevice(
                device("kid-contested", user: "user-\(index)", createdAt: Int64(index)))
        }
        let values = try outcomes.map { try $0.get() }
        #expect(values.filter { $0 }.count == 1)
        let winner = try #require(values.firstIndex(of: true))
        #expect(try first.device(kid: "kid-contested")?.user == "user-\(winner)")
    }

    static func sharesSigningKeys(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        // Two servers starting at once on an empty store both insert their key ...
        let outcomes = runConcurrently(2) { (index: Int) throws(StorageError) -> Bool in
            try (index == 0 ? first : second).insertSigningKey(
                kid: "key-\(index)", privatePEM: Array("pem-\(index)".utf8), createdAt: 100)
        }
        #expect(try outcomes.map { try $0.get() } == [true, true])
        // ... and both see the same keys in the same order, so both sign with the same oldest one.
        let seenByFirst = try first.signingKeys()
        let seenBySecond = try second.signingKeys()
        #expect(seenByFirst.map(\.kid) == ["key-0", "key-1"])
        #expect(seenBySecond.map(\.kid) == seenByFirst.map(\.kid))
        #expect(seenBySecond.map(\.privatePEM) == seenByFirst.map(\.privatePEM))
        // A server started later loads them too.
        let third = try database.open()
        defer { third.close() }
        #expect(try third.signingKeys().map(\.kid) == ["key-0", "key-1"])
    }

    static func insertsOnlyOneFirstSigningKey(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        // Eight servers starting at once on an empty store: exactly one key becomes the key.
        let outcomes = runConcurrently(8) { (index: Int) throws(StorageError) -> Bool in
            try (index % 2 == 0 ? first : second).insertFirstSigningKey(
                kid: "first-\(index)", privatePEM: Array("pem-\(index)".utf8), createdAt: 100)
        }
        let won = try outcomes.map { try $0.get() }
        #expect(won.filter { $0 }.count == 1)
        let winner = try #require(won.firstIndex(of: true))
        #expect(try first.signingKeys().map(\.kid) == ["first-\(winner)"])
        #expect(try second.signingKeys().map(\.kid) == ["first-\(winner)"])
        #expect(try !first.insertFirstSigningKey(kid: "late", privatePEM: [1], createdAt: 1))
        #expect(try second.signingKeys().count == 1)
    }

    static func insertsOnlyOneIDTokenKey(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        try #require(
            try first.insertFirstSigningKey(
                SigningKeyRecord(kid: "es", privatePEM: [1], createdAt: 100, algorithm: .es256)))
        // Eight ES256 servers starting at once, each with an RS256 key for ID tokens: one is kept.
        let outcomes = runConcurrently(8) { (index: Int) throws(StorageError) -> Bool in
            try (index % 2 == 0 ? first : second).insertIDTokenKey(
                SigningKeyRecord(
                    kid: "id-\(index)", privatePEM: Array("pem-\(index)".utf8), createdAt: 100, algorithm: .rs256,
                    activeFrom: 0))
        }
        let won = try outcomes.map { try $0.get() }
        #expect(won.filter { $0 }.count == 1)
        #expect(try second.signingKeys().filter { $0.algorithm == .rs256 }.count == 1)
    }

    static func migratesConcurrently(_ database: StorageContractDatabase) throws {
        for round in 0..<2 {
            let outcomes = runConcurrently(4) { (_: Int) throws(StorageError) -> Bool in
                let storage = try database.open()
                defer { storage.close() }
                try storage.healthCheck()
                return true
            }
            for outcome in outcomes {
                #expect(throws: Never.self, "round \(round)") { try outcome.get() }
            }
        }
        let storage = try database.open()
        defer { storage.close() }
        try storage.healthCheck()
        #expect(try storage.insertDevice(device("kid-1")))
    }

    static func survivesReopening(_ database: StorageContractDatabase) throws {
        let hash = try Array(CryptoPrimitives.sha256(Array("code".utf8)))
        do {
            let storage = try database.open()
            defer { storage.close() }
            #expect(try storage.insertDevice(device("kid-1", status: .active)))
            #expect(try storage.claimJTI(keyID: "kid-1", jti: "j1", expiresAt: 1_000))
            try storage.insertEnrollmentCode(hash: hash, user: "alice", expiresAt: 1_000)
            #expect(try storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 10))
            #expect(try storage.insertSigningKey(kid: "key-1", privatePEM: Array("pem".utf8), createdAt: 5))
        }
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.device(kid: "kid-1")?.status == .active)
        #expect(try !storage.claimJTI(keyID: "kid-1", jti: "j1", expiresAt: 1_000))
        #expect(try !storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 11))
        #expect(try storage.signingKeys().map(\.kid) == ["key-1"])
    }

    static func refusesNewerSchema(_ database: StorageContractDatabase) throws {
        let running = try database.open()
        defer { running.close() }
        try running.healthCheck()
        try database.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)")
        #expect(errorCode { () throws(StorageError) in _ = try database.open() } == .schemaTooNew)
        // A server already running on it stops reporting healthy.
        #expect(errorCode { () throws(StorageError) in try running.healthCheck() } == .unavailable)
    }
}
