import Dispatch
import Foundation
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

@Suite("Group commit of SQLite writes")
struct GroupCommitTests {
    /// Holds the committer inside a write, starts `writes` calls of `body` on threads of their
    /// own, one at a time, each once the previous one's write is queued, then lets the committer
    /// go: all of them run in one batch. Returns once every call has returned.
    ///
    /// Each call must queue exactly one write. Over sockets, starting them one at a time also
    /// gives each request its own server thread: a thread blocked on its write does not accept.
    private static func inOneBatch(
        _ storage: SQLiteStorage, writes: Int, _ body: @escaping @Sendable (Int) -> Void
    ) throws {
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        finished.enter()
        Thread {
            _ = try? storage.committer.write { _ in
                holding.signal()
                release.wait()
            }
            finished.leave()
        }.start()
        holding.wait()
        defer {
            release.signal()
            finished.wait()
        }
        for index in 0..<writes {
            finished.enter()
            Thread {
                body(index)
                finished.leave()
            }.start()
            let deadline = ServerClock.monotonicNanoseconds() + 20_000_000_000
            while storage.committer.queuedWriteCount <= index, ServerClock.monotonicNanoseconds() < deadline {
                usleep(500)
            }
            try #require(storage.committer.queuedWriteCount == index + 1, "write \(index) was not queued")
        }
    }

    @Test("concurrent claims share one transaction, and each jti is granted exactly once within it")
    func claimsInOneBatch() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        let results = Mutex<[Int: Bool]>([:])
        let commitsBefore = storage.committer.commitCount
        try Self.inOneBatch(storage, writes: 48) { index in
            let granted = (try? storage.claimJTI(keyID: "k", jti: "j\(index % 16)", expiresAt: 1000)) ?? false
            results.withLock { $0[index] = granted }
        }
        // The held write's batch, then one batch of all 48 claims.
        #expect(storage.committer.commitCount - commitsBefore == 2)
        let all = results.withLock { $0 }
        #expect(all.count == 48)
        for jti in 0..<16 {
            let winners = all.filter { $0.key % 16 == jti && $0.value }
            #expect(winners.count == 1, "jti j\(jti) was granted \(winners.count) times")
        }
        storage.close()
        // Durable: another instance of the file refuses every granted jti.
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        for jti in 0..<16 {
            #expect(try reopened.claimJTI(keyID: "k", jti: "j\(jti)", expiresAt: 1000) == false)
        }
    }

    @Test("a write that fails inside a batch is rolled back alone; the others commit")
    func failureIsolated() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        let results = Mutex<[Int: Result<Bool, StorageError>]>([:])
        try Self.inOneBatch(storage, writes: 10) { index in
            let result = Result { () throws(StorageError) -> Bool in
                guard index == 5 else { return try storage.claimJTI(keyID: "k", jti: "x\(index)", expiresAt: 1000) }
                return try storage.committer.write { connection throws(StorageError) in
                    try connection.run(
                        "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ('k', 'x5', 1000)")
                    throw StorageError(.queryFailed, "the write failed after its insert")
                }
            }
            results.withLock { $0[index] = result }
        }
        let all = results.withLock { $0 }
        for index in 0..<10 where index != 5 {
            #expect((try? all[index]?.get()) == true)
        }
        #expect(throws: StorageError.self) { try all[5]?.get() }
        storage.close()
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        #expect(try reopened.claimJTI(keyID: "k", jti: "x4", expiresAt: 1000) == false)
        // The failed write's insert was undone with it.
        #expect(try reopened.claimJTI(keyID: "k", jti: "x5", expiresAt: 1000))
    }

    @Test("last_login_at is read back at once, written with the next batch, within a second, and on close")
    func lastLoginCoalesced() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        let device = DeviceRecord(
            kid: "k1", user: "alice", name: "n", publicKeyPEM: "pem", status: .active, createdAt: 1)
        #expect(try storage.insertDevice(device))
        let raw = try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
        func onDisk() throws -> Int64? {
            try raw.query("SELECT last_login_at FROM devices WHERE kid = 'k1'") { $0.integer(0) }.first ?? nil
        }

        try storage.recordLogin(kid: "k1", at: 500)
        #expect(try storage.device(kid: "k1")?.lastLoginAt == 500)
        #expect(try storage.devices(user: "alice").first?.lastLoginAt == 500)
        #expect(try storage.allDevices().first?.lastLoginAt == 500)
        // With no other write, the flush timer writes it.
        let deadline = ServerClock.monotonicNanoseconds() + 10_000_000_000
        while try onDisk() != 500, ServerClock.monotonicNanoseconds() < deadline { usleep(20_000) }
        #expect(try onDisk() == 500)

        // The next batch of writes carries it.
        try storage.recordLogin(kid: "k1", at: 600)
        #expect(try storage.claimJTI(keyID: "k1", jti: "j", expiresAt: 1000))
        #expect(try onDisk() == 600)

        // Closing writes what is left.
        try storage.recordLogin(kid: "k1", at: 700)
        storage.close()
        #expect(try onDisk() == 700)
        #expect(throws: StorageError.self) { try storage.recordLogin(kid: "k1", at: 800) }
    }

    @Test("purging more expired jtis than one chunk deletes them all, and only them")
    func purgeInChunks() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        defer { storage.close() }
        let expired = SQLiteStorage.purgeChunkSize * 2 + 500
        try storage.committer.write { connection throws(StorageError) in
            for index in 0..<expired {
                try connection.run(
                    "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ('k', ?, 100)", [.text("old-\(index)")])
            }
        }
        #expect(try storage.claimJTI(keyID: "k", jti: "fresh", expiresAt: 10_000))
        #expect(try storage.purgeExpiredJTIs(now: 5_000) == expired)
        #expect(try storage.purgeExpiredJTIs(now: 5_000) == 0)
        #expect(try storage.claimJTI(keyID: "k", jti: "fresh", expiresAt: 10_000) == false)
        #expect(try storage.claimJTI(keyID: "k", jti: "old-0", expiresAt: 10_000))
    }

    @Test("concurrent logins over sockets: exactly one 200 per assertion, replays refused, also within one batch")
    func concurrentLoginsOverSockets() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer {
            $0.threads = 16
            $0.failureLimit = 100_000
        }
        defer { runner.stop() }
        let storage = try #require(runner.storage as? SQLiteStorage)
        let api = environment.socketAPI(runner)
        var keys: [RSAPrivateKey] = []
        for index in 1...4 {
            let key = try ServerTestKeys.key("batch-\(index)")
            #expect(try api.register(user: "batch\(index)", key: key).status == 201)
            keys.append(key)
        }

        // 16 requests (8 assertions, each twice) held at the replay-cache claim until all are
        // queued, so every replay meets its original inside one batch: one of each pair wins.
        let held = try (0..<8).map { try api.assertion(keys[$0 % keys.count]) }
        let heldStatuses = Mutex<[Int: [Int]]>([:])
        try Self.inOneBatch(storage, writes: 16) { index in
            let status = (try? api.login(assertion: held[index % 8]).status) ?? 0
            heldStatuses.withLock { $0[index % 8, default: []].append(status) }
        }
        for (index, statuses) in heldStatuses.withLock({ $0 }) {
            #expect(statuses.sorted() == [200, 400], "assertion \(index) got \(statuses)")
        }

        // Free-running load: 40 assertions, each sent three times, from 24 clients at once.
        let assertions = try (0..<40).map { try api.assertion(keys[$0 % keys.count]) }
        let requests = Mutex((0..<(assertions.count * 3)).map { $0 % assertions.count }.shuffled())
        let statuses = Mutex<[Int: [Int]]>([:])
        DispatchQueue.concurrentPerform(iterations: 24) { _ in
            while let index = requests.withLock({ $0.popLast() }) {
                let response = try? api.login(assertion: assertions[index])
                let status = response.map { $0.status == 400 && $0.errorCode != "invalid_grant" ? -1 : $0.status } ?? 0
                statuses.withLock { $0[index, default: []].append(status) }
            }
        }
        let all = statuses.withLock { $0 }
        #expect(all.count == assertions.count)
        for (index, statuses) in all {
            #expect(statuses.sorted() == [200, 400, 400], "assertion \(index) got \(statuses)")
        }
    }
}
