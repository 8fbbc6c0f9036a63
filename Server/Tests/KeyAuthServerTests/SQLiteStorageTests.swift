import Dispatch
import Glibc
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

@Suite("SQLite storage")
struct SQLiteStorageTests {
    private func device(_ kid: String, user: String = "alice", status: DeviceStatus.Stored = .active)
        -> DeviceRecord
    {
        DeviceRecord(kid: kid, user: user, name: "n", publicKeyPEM: "pem", status: status, createdAt: 100)
    }

    @Test("a server alone on its file syncs after COMMIT; an admin command or a server sharing it, inside COMMIT")
    func syncInCommitWhenShared() throws {
        let environment = TestEnvironment()
        let path = environment.directory.path + "/shared.db"
        // PRAGMA synchronous: 1 is NORMAL (the commit is visible before its fsync), 2 is FULL.
        func synchronous(_ storage: any ServerStorage) throws -> Int64? {
            let sqlite = try #require((storage as? SQLStorage)?.database as? SQLiteDatabase)
            return try sqlite.committer.read { connection throws(StorageError) in
                try connection.execute("PRAGMA synchronous").firstRow?.integer(0)
            }
        }
        do {
            let (alone, lock) = try StorageFactory.openForServing(path, alone: true)
            defer { alone.close() }
            #expect(try synchronous(alone) == 1)
            withExtendedLifetime(lock) {}
        }
        let admin = try StorageFactory.open(path, creatingIfMissing: false, migrating: false)
        #expect(try synchronous(admin) == 2)
        admin.close()
        let (shared, lock) = try StorageFactory.openForServing(path, alone: false)
        defer { shared.close() }
        #expect(try synchronous(shared) == 2)
        withExtendedLifetime(lock) {}
    }

    @Test("a new file gets the latest schema, in WAL mode, every version recorded in schema_migrations")
    func migrations() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        try storage.healthCheck()
        _ = try storage.insertDevice(device("k1"))
        #expect(access(environment.databasePath + "-wal", F_OK) == 0)
        storage.close()
        // Reopening applies nothing twice.
        let reopened = try SQLiteStorage(path: environment.databasePath)
        #expect(try reopened.device(kid: "k1")?.user == "alice")
        let connection = try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
        let versions = try connection.query("SELECT version FROM schema_migrations") { $0.integer(0) }
        #expect(versions == SQLSchema.migrations.map(\.version))
        let mode = try connection.query("PRAGMA journal_mode") { $0.text(0) }
        #expect(mode == ["wal"])
        let synchronous = try connection.query("PRAGMA synchronous") { $0.integer(0) }
        #expect(synchronous == [2])
    }

    @Test("a version 6 database migrates to 7: its CIBA clients and sign-in requests keep working")
    func migratesVersionSixClients() throws {
        let environment = TestEnvironment()
        let connection = try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
        try SQLSchema.build(on: connection, upTo: 6)
        let hash = [UInt8](repeating: 4, count: 32)
        try connection.execute(
            "INSERT INTO clients (client_id, name, secret_hash, created_at) VALUES ('old', 'Desk', $1, 5)",
            [.blob(hash)])
        try connection.execute(
            """
            INSERT INTO sign_in_requests (id, kind, client_id, user_name, binding_message, status, created_at,
                expires_at, poll_interval, methods)
            VALUES ('r1', 'backchannel', 'old', 'alice', '42', 'pending', 10, 310, 5, '')
            """)
        let storage = try SQLiteStorage(path: environment.databasePath)
        defer { storage.close() }
        #expect(
            try storage.client(id: "old")
                == ClientRecord(id: "old", name: "Desk", secretHash: hash, createdAt: 5))
        #expect(try storage.signInRequest(id: "r1")?.redirectURI == nil)
        #expect(try storage.signInRequest(id: "r1")?.clientID == "old")
    }

    @Test("a version 14 database migrates to 15: a recovery-codes request's session moves to requested_by")
    func migratesRecoveryCodeSessions() throws {
        let environment = TestEnvironment()
        let connection = try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
        try SQLSchema.build(on: connection, upTo: 14)
        for (id, kind, subject) in [("r1", "recovery-codes", "c2Vzc2lvbg"), ("d1", "device", "kid-9")] {
            try connection.execute(
                """
                INSERT INTO sign_in_requests (id, kind, user_name, binding_message, status, created_at, expires_at,
                    poll_interval, methods, subject)
                VALUES ($1, $2, 'alice', '42', 'pending', 10, 310, 5, '', $3)
                """, [.text(id), .text(kind), .text(subject)])
        }
        let storage = try SQLiteStorage(path: environment.databasePath)
        defer { storage.close() }
        let codes = try #require(try storage.signInRequest(id: "r1"))
        #expect(codes.requestedBy == "c2Vzc2lvbg" && codes.subject == nil)
        let device = try #require(try storage.signInRequest(id: "d1"))
        #expect(device.subject == "kid-9" && device.requestedBy == nil)
    }

    @Test("a version 15 database migrates to 16: its devices keep working, their key protection unknown")
    func migratesKeyProtection() throws {
        let environment = TestEnvironment()
        let connection = try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
        try SQLSchema.build(on: connection, upTo: 15)
        try connection.execute(
            """
            INSERT INTO devices (kid, user_name, name, public_key_pem, status, created_at, tier)
            VALUES ('kid-old', 'alice', 'laptop', 'PEM', 'active', 10, 'software')
            """)
        let storage = try SQLiteStorage(path: environment.databasePath)
        defer { storage.close() }
        let device = try #require(try storage.device(kid: "kid-old"))
        #expect(device.status == .active && device.keyProtection == nil)
    }

    @Test("a database from a newer server is refused rather than written to")
    func newerSchema() throws {
        let environment = TestEnvironment()
        try SQLiteStorage(path: environment.databasePath).close()
        try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
            .execute("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)")
        #expect {
            _ = try SQLiteStorage(path: environment.databasePath)
        } throws: { error in
            (error as? StorageError)?.code == .schemaTooNew
        }
    }

    @Test("an unopenable path is a storage error")
    func openFailures() throws {
        #expect(throws: StorageError.self) { _ = try SQLiteStorage(path: "/nonexistent-directory/x/y.db") }
        #expect(throws: StorageError.self) { _ = try StorageFactory.open("/nonexistent-directory/x/y.db") }
    }

    @Test("insertDevice refuses a duplicate kid; devices(user:) and hasActiveDevice see only that user")
    func devices() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        #expect(try storage.insertDevice(device("k1")))
        #expect(try storage.insertDevice(device("k1", user: "bob")) == false)
        #expect(try storage.insertDevice(device("k2", user: "bob", status: .pending)))
        #expect(try storage.devices(user: "alice").map(\.kid) == ["k1"])
        #expect(try storage.hasActiveDevice(user: "alice"))
        #expect(try storage.hasActiveDevice(user: "bob") == false)
        #expect(try storage.allDevices().count == 2)
        #expect(try storage.device(kid: "nope") == nil)
    }

    @Test("updateStatus only moves from the expected status, and stamps approval and revocation times")
    func statusTransitions() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        _ = try storage.insertDevice(device("k1", status: .pending))
        #expect(try storage.updateStatus(kid: "k1", from: .active, to: .revoked, at: 5) == false)
        #expect(try storage.updateStatus(kid: "k1", from: .pending, to: .active, at: 200))
        #expect(try storage.device(kid: "k1")?.approvedAt == 200)
        #expect(try storage.updateStatus(kid: "k1", from: .pending, to: .active, at: 300) == false)
        #expect(try storage.updateStatus(kid: "k1", from: .active, to: .revoked, at: 400))
        let revoked = try storage.device(kid: "k1")
        #expect(revoked?.status == .revoked)
        #expect(revoked?.revokedAt == 400)
        try storage.recordLogin(kid: "k1", at: 500)
        #expect(try storage.device(kid: "k1")?.lastLoginAt == 500)
    }

    @Test("claimJTI succeeds once per key and jti, even under concurrent claims, and purging forgets expired ones")
    func replayCache() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        let wins = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            if (try? storage.claimJTI(keyID: "k", jti: "j", expiresAt: 1000)) == true {
                wins.add(1, ordering: .relaxed)
            }
        }
        #expect(wins.load(ordering: .relaxed) == 1)
        #expect(try storage.claimJTI(keyID: "other", jti: "j", expiresAt: 1000))
        #expect(try storage.purgeExpiredJTIs(now: 999) == 0)
        #expect(try storage.purgeExpiredJTIs(now: 1001) == 2)
        #expect(try storage.claimJTI(keyID: "k", jti: "j", expiresAt: 2000))
    }

    @Test("an enrollment code is consumed once even under concurrent use")
    func enrollmentCodes() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        let hash = try CryptoPrimitives.sha256(Array("code".utf8))
        try storage.insertEnrollmentCode(hash: hash, user: "alice", expiresAt: 1000)
        #expect(try storage.consumeEnrollmentCode(hash: hash, user: "bob", now: 10) == false)
        let wins = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            if (try? storage.consumeEnrollmentCode(hash: hash, user: "alice", now: 10)) == true {
                wins.add(1, ordering: .relaxed)
            }
        }
        #expect(wins.load(ordering: .relaxed) == 1)
        try storage.insertEnrollmentCode(hash: CryptoPrimitives.sha256([1]), user: "alice", expiresAt: 1000)
        #expect(
            try storage.consumeEnrollmentCode(hash: CryptoPrimitives.sha256([1]), user: "alice", now: 1000) == false)
        #expect(try storage.purgeExpiredEnrollmentCodes(now: 1001) == 2)
    }

    @Test("the server signing key is created once and reused after a restart")
    func signingKeyPersists() throws {
        let environment = TestEnvironment()
        let configuration = try environment.configuration()
        let first = try SQLiteStorage(path: environment.databasePath)
        let issuerKey = try KeyAuthResponder(
            configuration: configuration, issuer: "https://x", storage: first, log: SilentLog()
        ).signingKeys.current(at: ServerClock.now()).kid
        first.close()
        let second = try SQLiteStorage(path: environment.databasePath)
        let again = try KeyAuthResponder(
            configuration: configuration, issuer: "https://x", storage: second, log: SilentLog()
        ).signingKeys.current(at: ServerClock.now()).kid
        #expect(issuerKey == again)
        #expect(try second.signingKeys().count == 1)
    }

    @Test("a closed storage throws StorageError for every call")
    func closed() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        storage.close()
        #expect(throws: StorageError.self) { try storage.healthCheck() }
        #expect(throws: StorageError.self) { _ = try storage.claimJTI(keyID: "k", jti: "j", expiresAt: 1) }
    }
}
