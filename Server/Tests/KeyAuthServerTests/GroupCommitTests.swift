import Dispatch
import Foundation
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

/// SQLite's group commit, seen from outside: what a caller of the storage can observe about
/// durability and batching (results, errors, what another connection reads), never the
/// committer's own counters.
@Suite("Group commit of SQLite writes", .timeLimit(.minutes(10)))
struct GroupCommitTests {
    /// Storage over a ``QueueWatchingDatabase`` on the environment's file.
    private static func open(_ environment: TestEnvironment) throws -> (SQLStorage, QueueWatchingDatabase) {
        let database = try QueueWatchingDatabase(path: environment.databasePath)
        return (try SQLStorage(database: database, location: environment.databasePath, now: { 1 }), database)
    }

    /// Holds the group commit in the fsync of a batch of its own, starts `writes` calls of
    /// `body` on threads of their own, one at a time, each once the previous one's write has run
    /// in the next batch, runs `whileHeld`, then lets the fsync go: all the writes are in that
    /// next batch, in the order started. Returns once every call has returned.
    ///
    /// Each call must make exactly one write through `database`.
    private static func inOneBatch(
        _ database: QueueWatchingDatabase, writes: Int, _ body: @escaping @Sendable (Int) -> Void,
        whileHeld: () throws -> Void = {}
    ) throws {
        database.disk.hold()
        // A write of its own, inside a scope so that it does not wait: its batch is committed at
        // once and its fsync stalls on the held disk, and the writes below form the next batch.
        _ = try DurabilityScope.run { try database.sqlite.write { _ in () } }
        try #require(database.disk.waitUntilStalled(), "the group commit did not reach the fsync")
        let finished = DispatchGroup()
        defer {
            database.disk.release()
            if finished.wait(timeout: .now() + 60) == .timedOut {
                Issue.record("a write had not returned 60 s after the disk was released")
            }
        }
        let ranBefore = database.queuedWrites
        for index in 0..<writes {
            finished.enter()
            Thread {
                body(index)
                finished.leave()
            }.start()
            let deadline = ServerClock.monotonicNanoseconds() + 20_000_000_000
            while database.queuedWrites <= ranBefore + index, ServerClock.monotonicNanoseconds() < deadline {
                usleep(500)
            }
            try #require(database.queuedWrites == ranBefore + index + 1, "write \(index) did not run")
        }
        try whileHeld()
    }

    @Test("writes queued together run in the order queued: of three claims of each jti, the first wins")
    func claimsInOneBatch() throws {
        let environment = TestEnvironment()
        let (storage, database) = try Self.open(environment)
        let results = Mutex<[Int: Bool]>([:])
        try Self.inOneBatch(database, writes: 48) { index in
            let granted = (try? storage.claimJTI(keyID: "k", jti: "j\(index % 16)", expiresAt: 1000)) ?? false
            results.withLock { $0[index] = granted }
        }
        let all = results.withLock { $0 }
        #expect((0..<48).map { all[$0] } == (0..<48).map { $0 < 16 })
        storage.close()
        // Durable: another instance of the file refuses every granted jti.
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        for jti in 0..<16 {
            #expect(try reopened.claimJTI(keyID: "k", jti: "j\(jti)", expiresAt: 1000) == false)
        }
    }

    /// Claims `prefix0`, `prefix1`, ... in one batch, except that write `special` runs
    /// `specialWrite` instead; returns each write's outcome, by index.
    private static func claimsInOneBatch(
        _ storage: SQLStorage, _ database: QueueWatchingDatabase, writes: Int, prefix: String, special: Int,
        _ specialWrite: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Bool
    ) throws -> [Int: Result<Bool, StorageError>] {
        let results = Mutex<[Int: Result<Bool, StorageError>]>([:])
        try inOneBatch(database, writes: writes) { index in
            let result = Result { () throws(StorageError) -> Bool in
                guard index == special else {
                    return try storage.claimJTI(keyID: "k", jti: "\(prefix)\(index)", expiresAt: 1000)
                }
                return try database.write(specialWrite)
            }
            results.withLock { $0[index] = result }
        }
        return results.withLock { $0 }
    }

    /// The message of the error `outcome` failed with, or nil.
    private static func errorMessage(_ outcome: Result<Bool, StorageError>?) -> String? {
        guard case .failure(let error) = outcome else { return nil }
        return error.message
    }

    @Test("a write that fails inside a batch is rolled back alone; the others commit")
    func failureIsolated() throws {
        let environment = TestEnvironment()
        let (storage, database) = try Self.open(environment)
        let all = try Self.claimsInOneBatch(storage, database, writes: 10, prefix: "x", special: 5) {
            connection throws(StorageError) in
            try connection.execute("INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ('k', 'x5', 1000)")
            throw StorageError(.queryFailed, "the write failed after its insert")
        }
        for index in 0..<10 where index != 5 {
            #expect((try? all[index]?.get()) == true)
        }
        // Its own error, not the batch's.
        #expect(Self.errorMessage(all[5]) == "the write failed after its insert")
        storage.close()
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        #expect(try reopened.claimJTI(keyID: "k", jti: "x4", expiresAt: 1000) == false)
        // The failed write's insert was undone with it.
        #expect(try reopened.claimJTI(keyID: "k", jti: "x5", expiresAt: 1000))
    }

    @Test("the writes of a batch share its transaction: when SQLite loses it, all of them fail and none is stored")
    func batchSharesItsTransaction() throws {
        let environment = TestEnvironment()
        let (storage, database) = try Self.open(environment)
        // Write 3 ends the transaction, as SQLite does on its own after an I/O error or a full disk.
        let all = try Self.claimsInOneBatch(storage, database, writes: 8, prefix: "y", special: 3) {
            connection throws(StorageError) in
            try connection.execute("ROLLBACK")
            throw StorageError(.queryFailed, "the transaction was lost")
        }
        for index in 0..<4 {
            // Claims 0 to 2 had succeeded inside the batch; they are answered with its failure.
            #expect(Self.errorMessage(all[index]) == "SQLite rolled back a batch of writes", "write \(index)")
        }
        for index in 4..<8 {
            // The writes after it opened a fresh transaction.
            #expect((try? all[index]?.get()) == true, "write \(index)")
        }
        #expect(try storage.claimJTI(keyID: "k", jti: "after", expiresAt: 1000))
        storage.close()
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        for index in 0..<8 where index != 3 {
            #expect(
                try reopened.claimJTI(keyID: "k", jti: "y\(index)", expiresAt: 1000) == (index < 4),
                "write \(index) was stored or not")
        }
        #expect(try !reopened.claimJTI(keyID: "k", jti: "after", expiresAt: 1000))
    }

    @Test("a read that makes SQLite end the open batch's transaction fails that batch; the next write opens its own")
    func readLosesTheBatch() throws {
        let environment = TestEnvironment()
        let (storage, database) = try Self.open(environment)
        database.disk.hold()
        _ = try DurabilityScope.run { try database.sqlite.write { _ in () } }
        try #require(database.disk.waitUntilStalled(), "the group commit did not reach the fsync")
        // A request claims in the next batch, then reads on the writer connection, and the read
        // ends the transaction as SQLite does after an I/O error.
        let (first, firstScope) = try DurabilityScope.run { () throws(StorageError) -> Bool in
            let claimed = try storage.claimJTI(keyID: "k", jti: "r1", expiresAt: 1000)
            _ = try? database.sqlite.read { connection throws(StorageError) in try connection.execute("ROLLBACK") }
            return claimed
        }
        #expect(first)
        let (second, secondScope) = try DurabilityScope.run { () throws(StorageError) -> Bool in
            try storage.claimJTI(keyID: "k", jti: "r2", expiresAt: 1000)
        }
        #expect(second)
        database.disk.release()
        let outcomes = Mutex<[Int: StorageError?]>([:])
        let settled = DispatchGroup()
        for (index, scope) in [firstScope, secondScope].enumerated() {
            settled.enter()
            scope.whenDurable { failure in
                outcomes.withLock { $0[index] = failure }
                settled.leave()
            }
        }
        #expect(settled.wait(timeout: .now() + 60) == .success)
        // The first request is told its claim failed, and it is not stored; the second's is
        // answered as durable, and it is.
        #expect(outcomes.withLock { $0[0] ?? nil }?.message == "SQLite rolled back a batch of writes")
        #expect(outcomes.withLock { $0[1] ?? nil } == nil)
        storage.close()
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        #expect(try reopened.claimJTI(keyID: "k", jti: "r1", expiresAt: 1000))
        #expect(try !reopened.claimJTI(keyID: "k", jti: "r2", expiresAt: 1000))
    }

    @Test(
        "a read of data whose fsync failed for good fails too; one that failed for now waits for a sync that succeeds",
        arguments: [true, false])
    func readAfterFailedSync(_ forGood: Bool) throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        disk.failing.store(true, ordering: .releasing)
        #expect(throws: StorageError.self) {
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('b', 2)")
            }
        }
        // Every sync since the failed write has failed too, so a sync counted from here on
        // succeeded after the disk recovered.
        let successfulBefore = disk.successfulSyncs.load(ordering: .acquiring)
        // The failed sync says whether it was for good, as SQLiteWALFile's does once it returns;
        // a passing failure is over by the next sync.
        disk.failsForGood.store(forGood, ordering: .releasing)
        if !forGood { disk.failing.store(false, ordering: .releasing) }
        let (rows, scope) = try database.scopedIntegers("SELECT v FROM t WHERE k = 'b'")
        // Committed, so a reader sees the row its writer was told failed. Lost for good, no sync
        // will make it durable: the answer must fail too. For now, the committer syncs again
        // on its own (no other write comes), and the answer waits for that, then goes out. That
        // sync may already have run while the read did, and then the answer is durable at once.
        #expect(rows == [2])
        if !forGood, case .durable = scope.outcome,
            disk.successfulSyncs.load(ordering: .acquiring) == successfulBefore
        {
            Issue.record("answered before any sync succeeded")
        }
        let outcome = scope.settledOutcome()
        #expect(outcome != nil, "the read waited for ever")
        let failure = outcome ?? nil
        #expect((failure != nil) == forGood, "\(String(describing: failure))")
    }

    @Test("a writer told its sync failed for now, reading its row at once, waits for a sync that succeeds")
    func readAsFailureIsHeard() throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        disk.failing.store(true, ordering: .releasing)
        disk.holdsFailure.store(true, ordering: .releasing)
        let (_, writeScope) = try DurabilityScope.run { () throws(StorageError) -> SQLResult in
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('c', 3)")
            }
        }
        try #require(disk.reachedFailure.wait(timeout: .now() + 30) == .success, "the batch never reached its fsync")
        // The write's waiter runs as its batch settles, on the committer's thread, as a server's
        // answer to the write goes out; the client's next request reads the row straight away.
        let readScope = Mutex<DurabilityScope?>(nil)
        let heard = DispatchSemaphore(value: 0)
        writeScope.whenDurable { failure in
            do {
                let (rows, scope) = try database.scopedIntegers("SELECT v FROM t WHERE k = 'c'")
                #expect(rows == [3], "the committed row is visible")
                readScope.withLock { $0 = scope }
            } catch {
                Issue.record("the read failed: \(error)")
            }
            #expect(failure != nil, "the write's sync failed")
            heard.signal()
        }
        disk.proceed.signal()
        try #require(heard.wait(timeout: .now() + 30) == .success, "the write's waiter never ran")
        let scope = try #require(readScope.withLock { $0 })
        disk.expectHeldThenAnswered(scope)
    }

    @Test("a read already running as the storage closes is held when a sync fails for now")
    func closingKeepsReadsHeld() throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        disk.failing.store(true, ordering: .releasing)
        disk.holdsFailure.store(true, ordering: .releasing)
        // A request's read, on the one reader, is past the storage's closed check before it
        // closes, and runs its query after the close's last sync failed.
        let inRead = DispatchSemaphore(value: 0)
        let query = DispatchSemaphore(value: 0)
        let readDone = DispatchSemaphore(value: 0)
        let read = Mutex<([Int64?], DurabilityScope)?>(nil)
        Thread.detachNewThread {
            defer { readDone.signal() }
            do {
                let result = try DurabilityScope.run { () throws(StorageError) -> [Int64?] in
                    try database.read { connection throws(StorageError) in
                        inRead.signal()
                        _ = query.wait(timeout: .now() + 30)
                        return try connection.query("SELECT v FROM t WHERE k = 'e'", []) { row throws(StorageError) in
                            row.integer(0)
                        }
                    }
                }
                read.withLock { $0 = result }
            } catch {
                Issue.record("the read failed: \(error)")
            }
        }
        try #require(inRead.wait(timeout: .now() + 30) == .success, "the read never started")
        let (_, writeScope) = try DurabilityScope.run { () throws(StorageError) -> SQLResult in
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('e', 5)")
            }
        }
        try #require(disk.reachedFailure.wait(timeout: .now() + 30) == .success, "the batch never reached its fsync")
        let closed = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            database.close()
            closed.signal()
        }
        // close() marks the committer closed at once, then waits for the batch's sync.
        var polls = 0
        while polls < 30_000, !database.committer.writer.withLock({ $0.isClosed }) {
            Thread.sleep(forTimeInterval: 0.001)
            polls += 1
        }
        #expect(polls < 30_000, "close() never marked the committer closed")
        disk.proceed.signal()
        let written = writeScope.settledOutcome()
        #expect(written ?? nil != nil, "the write's sync failed")
        query.signal()
        try #require(readDone.wait(timeout: .now() + 30) == .success, "the read never finished")
        let (rows, scope) = try #require(read.withLock { $0 })
        #expect(rows == [5], "the committed row is visible")
        disk.expectHeldThenAnswered(scope)
        #expect(closed.wait(timeout: .now() + 30) == .success, "close() never returned")
    }

    @Test("a COMMIT that fails while a sync is failing for now leaves reads held for the resync")
    func failedCommitKeepsTheMarker() throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        try database.migrate { connection throws(StorageError) in
            try connection.execute(
                "CREATE TABLE child (k TEXT REFERENCES t (k) DEFERRABLE INITIALLY DEFERRED)")
        }
        disk.failing.store(true, ordering: .releasing)
        #expect(throws: StorageError.self) {
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('d', 4)")
            }
        }
        // The next batch's COMMIT fails (a deferred foreign key, as a full disk would) and rolls
        // back: it showed readers nothing, and the row above is still not durable.
        #expect(throws: StorageError.self) {
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO child (k) VALUES ('nowhere')")
            }
        }
        let (rows, scope) = try database.scopedIntegers("SELECT v FROM t WHERE k = 'd'")
        #expect(rows == [4])
        // Every sync has failed: nothing the read saw can be durable.
        if case .durable = scope.outcome {
            Issue.record("the read was answered from a row no sync had made durable")
        }
        // Settled once a resync runs: durable if it came after the disk was back, else failed.
        disk.failing.store(false, ordering: .releasing)
        #expect(scope.settledOutcome() != nil, "the read waited for ever")
    }

    @Test("a write is in the file when it returns: a connection opened right after sees it")
    func visibleWhenReturned() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath)
        defer { storage.close() }
        let path = environment.databasePath
        let outcomes = runConcurrently(32) { (index: Int) throws(StorageError) -> [Int64?] in
            guard try storage.claimJTI(keyID: "k", jti: "v\(index)", expiresAt: 1000) else { return [] }
            return try SQLiteConnection(path: path, busyTimeoutMilliseconds: 5000).query(
                "SELECT COUNT(*) FROM used_jtis WHERE key_id = 'k' AND jti = $1", [.text("v\(index)")]
            ) { $0.integer(0) }
        }
        for (index, outcome) in outcomes.enumerated() {
            #expect(try outcome.get() == [1], "claim \(index)")
        }
    }

    @Test("a disk that keeps failing fails each write, and a deferred write is retried once a second, not in a loop")
    func failingDiskDoesNotSpin() throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        disk.failing.store(true, ordering: .releasing)
        try database.writeEventually(
            SQLDeferredWrite(sql: "UPDATE t SET v = $1 WHERE k = $2", key: "a", value: .integer(1)))
        #expect(throws: StorageError.self) {
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('b', 2)")
            }
        }
        // Before the fix the failed deferred write opened a batch of its own on every turn of
        // the commit run: hundreds of thousands of syncs a second. Now: one flush a second, and
        // one sync a second tried again for the data committed without one, so a few more than
        // twice the seconds that passed.
        let (during, seconds) = disk.syncs(sleeping: 1.5)
        #expect(during <= 2 * seconds + 3, "\(during) syncs in \(seconds) s while the disk failed")
    }

    @Test("many writes failing for now keep one sync a second going, not one for each of them")
    func oneResyncForManyFailures() throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        disk.failing.store(true, ordering: .releasing)
        for index in 0..<8 {
            #expect(throws: StorageError.self) {
                try database.write { connection throws(StorageError) in
                    try connection.execute("INSERT INTO t (k, v) VALUES ('w\(index)', \(index))")
                }
            }
        }
        // Before the fix each failed write started its own sync a second, each tried again
        // every second: eight here, sixteen syncs or more in two seconds.
        let (during, seconds) = disk.syncs(sleeping: 2.5)
        #expect(during <= seconds + 2, "\(during) syncs in \(seconds) s while the disk failed")
        // Once the disk is back, a read of what was committed waits for one sync, which succeeds.
        disk.failing.store(false, ordering: .releasing)
        let (rows, scope) = try database.scopedIntegers("SELECT COUNT(*) FROM t WHERE k LIKE 'w%'")
        #expect(rows == [8])
        let outcome = scope.settledOutcome()
        #expect(outcome != nil, "the read waited for ever")
        #expect(outcome ?? nil == nil)
    }

    @Test("under writes that never pause, the log is rewound instead of growing without end")
    func logRewoundUnderSteadyWrites() throws {
        let environment = TestEnvironment()
        // 256 KiB before a rewind, so that a test writes past it many times.
        let database = try SQLiteDatabase(
            path: environment.databasePath, readerCount: 2, busyTimeoutMilliseconds: 5000, restartBytes: 256 * 1024)
        defer { database.close() }
        try database.migrate { connection throws(StorageError) in
            try connection.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB)")
        }
        let wal = environment.databasePath + "-wal"
        let largest = Atomic<Int>(0)
        // Four writers and a reader, all at once: a batch always begins before the last one's
        // passive checkpoint has run, which is what kept the log from ever being rewound.
        let outcomes = runConcurrently(5) { (thread: Int) throws(StorageError) -> Int in
            for index in 0..<400 {
                if thread == 4 {
                    _ = try database.read { connection throws(StorageError) in
                        try connection.execute("SELECT COUNT(*) FROM t")
                    }
                } else {
                    try database.write { connection throws(StorageError) in
                        try connection.execute(
                            "INSERT INTO t (k, v) VALUES ($1, zeroblob(3000))", [.text("\(thread)-\(index)")])
                    }
                }
                let size = (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0
                _ = largest.max(size, ordering: .relaxed)
            }
            return 0
        }
        for outcome in outcomes { _ = try outcome.get() }
        // 1,600 rows of 3 KB wrote some 18 MB of log pages (every row takes a page of its own and
        // its index's); the log was rewound and never held more than a few of its 256 KiB rounds.
        #expect(database.committer.logRestarts > 0)
        #expect(
            largest.load(ordering: .relaxed) < 2 * 1024 * 1024,
            "the log reached \(largest.load(ordering: .relaxed)) bytes")
        let count = try database.read { connection throws(StorageError) in
            try connection.execute("SELECT COUNT(*) FROM t").firstRow?.integer(0)
        }
        #expect(count == 1_600, "\(String(describing: count)) rows")
    }

    @Test("closing answers every write it accepted, makes them durable, then refuses writes")
    func closeFinishesAcceptedWrites() throws {
        let environment = TestEnvironment()
        let (storage, database) = try Self.open(environment)
        let results = Mutex<[Int: Result<Bool, StorageError>]>([:])
        let closed = DispatchGroup()
        try Self.inOneBatch(
            database, writes: 5,
            { index in
                let result = Result { () throws(StorageError) in
                    try storage.claimJTI(keyID: "k", jti: "c\(index)", expiresAt: 1000)
                }
                results.withLock { $0[index] = result }
            },
            whileHeld: {
                closed.enter()
                Thread {
                    storage.close()
                    closed.leave()
                }.start()
                // Until `close` refuses new writes; what it accepted meanwhile it must answer.
                var refusal: StorageError.Code?
                let deadline = ServerClock.monotonicNanoseconds() + 20_000_000_000
                while refusal == nil, ServerClock.monotonicNanoseconds() < deadline {
                    refusal = StorageContract.errorCode { () throws(StorageError) in
                        // In a scope, so that an accepted probe does not wait for the held disk.
                        _ = try DurabilityScope.run { () throws(StorageError) in
                            try database.sqlite.write { _ in () }
                        }
                    }
                    usleep(500)
                }
                try #require(refusal == .closed)
            })
        #expect(closed.wait(timeout: .now() + 20) == .success, "close did not return")
        let all = results.withLock { $0 }
        for index in 0..<5 {
            #expect((try? all[index]?.get()) == true, "write \(index)")
        }
        #expect(
            StorageContract.errorCode { () throws(StorageError) in
                _ = try storage.claimJTI(keyID: "k", jti: "late", expiresAt: 1000)
            } == .closed)
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        for index in 0..<5 {
            #expect(try !reopened.claimJTI(keyID: "k", jti: "c\(index)", expiresAt: 1000), "write \(index)")
        }
        #expect(try reopened.claimJTI(keyID: "k", jti: "late", expiresAt: 1000))
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

    @Test("concurrent logins over sockets: exactly one 200 per assertion, replays refused, also within one batch")
    func concurrentLoginsOverSockets() throws {
        let environment = TestEnvironment()
        let (storage, database) = try Self.open(environment)
        let runner = try environment.startServer(storage: storage) {
            $0.failureLimit = 100_000
            // The claims go through the group commit only with the replay cache in the database.
            $0.replayCache = .database
        }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        var keys: [RSAPrivateKey] = []
        for index in 1...4 {
            let key = try ServerTestKeys.key("batch-\(index)")
            #expect(try api.register(user: "batch\(index)", key: key).status == 201)
            keys.append(key)
        }

        // 16 requests (8 assertions, each twice) whose claims all run in one batch, held until
        // all have run, so every replay meets its original inside it: one of each pair wins.
        let held = try (0..<8).map { try api.assertion(keys[$0 % keys.count]) }
        let heldStatuses = Mutex<[Int: [Int]]>([:])
        try Self.inOneBatch(database, writes: 16) { index in
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

/// A SQLite database on a disk whose fsync a test can stall, counting the writes that have run
/// (in a batch, not necessarily durable yet); otherwise the plain ``SQLiteDatabase``. The count
/// lives here, in the test, not in the committer.
final class QueueWatchingDatabase: SQLDatabase {
    let sqlite: SQLiteDatabase
    let disk: StallableDisk
    private let ran = Atomic<Int>(0)

    init(path: String) throws(StorageError) {
        disk = StallableDisk(SQLiteWALFile(databasePath: path))
        sqlite = try SQLiteDatabase(path: path, readerCount: 2, busyTimeoutMilliseconds: 5000, log: disk)
    }

    /// Writes that have run through ``write(_:)`` so far.
    var queuedWrites: Int { ran.load(ordering: .acquiring) }

    var dialect: SQLDialect { sqlite.dialect }

    var deviceChanges: SQLiteDeviceChanges? { sqlite.deviceChanges }

    var writesBlockUntilDurable: Bool { sqlite.writesBlockUntilDurable }

    func read<Result: Sendable>(
        _ body: (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try sqlite.read(body)
    }

    func write<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try sqlite.write { connection throws(StorageError) in
            // Counted whether the body succeeds or fails: it ran in the batch either way.
            defer { self.ran.add(1, ordering: .releasing) }
            return try body(connection)
        }
    }

    func migrate(_ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Void) throws(StorageError) {
        try sqlite.migrate(body)
    }

    func noteKeptRead() {
        sqlite.noteKeptRead()
    }

    func writeEventually(_ write: SQLDeferredWrite) throws(StorageError) {
        try sqlite.writeEventually(write)
    }

    func pendingValue(of sql: String, key: String) -> SQLValue? {
        sqlite.pendingValue(of: sql, key: key)
    }

    func pendingValues(of sql: String) -> [String: SQLValue] {
        sqlite.pendingValues(of: sql)
    }

    func close() {
        sqlite.close()
    }
}

extension SQLiteDatabase {
    /// The first column of `sql`'s rows as integers, read in a ``DurabilityScope`` of its own,
    /// with the scope: what the answer of a request that read them would wait for.
    func scopedIntegers(_ sql: String) throws(StorageError) -> ([Int64?], DurabilityScope) {
        try DurabilityScope.run { () throws(StorageError) -> [Int64?] in
            try read { connection throws(StorageError) in
                try connection.query(sql, []) { row throws(StorageError) in row.integer(0) }
            }
        }
    }
}

extension DurabilityScope {
    /// Waits up to 30 s for what the scope noted to settle: nil when it did not, else the
    /// failure it settled with, if any.
    func settledOutcome() -> StorageError?? {
        let outcome = Mutex<StorageError??>(nil)
        let settled = DispatchSemaphore(value: 0)
        whenDurable { failure in
            outcome.withLock { $0 = .some(failure) }
            settled.signal()
        }
        guard settled.wait(timeout: .now() + 30) == .success else { return nil }
        return outcome.withLock { $0 }
    }
}

/// A disk whose fsync fails while ``failing`` is set, counting every attempt.
final class FailingDisk: SQLiteWALSync {
    let failing = Atomic<Bool>(false)
    /// Whether a failure is for good, as a writeback error is (``SQLiteWALSync/lostDurability``).
    let failsForGood = Atomic<Bool>(false)
    let syncs = Atomic<Int>(0)
    /// How many syncs returned without failing.
    let successfulSyncs = Atomic<Int>(0)
    /// While set, a sync about to fail signals ``reachedFailure`` and waits for ``proceed``.
    let holdsFailure = Atomic<Bool>(false)
    let reachedFailure = DispatchSemaphore(value: 0)
    let proceed = DispatchSemaphore(value: 0)

    var lostDurability: StorageError? {
        failing.load(ordering: .acquiring) && failsForGood.load(ordering: .acquiring)
            ? StorageError(.queryFailed, "the test's disk fails for good") : nil
    }

    /// Sleeps `interval` seconds, and returns the syncs tried meanwhile and the whole seconds
    /// that passed (a loaded machine may oversleep).
    func syncs(sleeping interval: Double) -> (count: Int, seconds: Int) {
        let before = syncs.load(ordering: .acquiring)
        let started = ServerClock.monotonicNanoseconds()
        Thread.sleep(forTimeInterval: interval)
        let count = syncs.load(ordering: .acquiring) - before
        return (count, Int((ServerClock.monotonicNanoseconds() - started) / 1_000_000_000))
    }

    /// A database on the environment's file synced by a new failing disk, with one table
    /// `t (k TEXT PRIMARY KEY, v INTEGER)`; the caller closes it.
    static func database(in environment: TestEnvironment) throws -> (SQLiteDatabase, FailingDisk) {
        let disk = FailingDisk()
        return (try tableDatabase(in: environment, log: disk), disk)
    }

    /// Expects `scope`, a read's, not to be answered yet, with the disk failing and holding its
    /// next sync; then lets the disk work and expects the resync, a sync already held
    /// included, to answer the read.
    func expectHeldThenAnswered(_ scope: DurabilityScope, sourceLocation: SourceLocation = #_sourceLocation) {
        if case .durable = scope.outcome {
            Issue.record("the read was answered from a row no sync had made durable", sourceLocation: sourceLocation)
        }
        holdsFailure.store(false, ordering: .releasing)
        failing.store(false, ordering: .releasing)
        proceed.signal()
        let outcome = scope.settledOutcome()
        #expect(outcome != nil, "the read waited for ever", sourceLocation: sourceLocation)
        #expect(outcome ?? nil == nil, sourceLocation: sourceLocation)
    }

    func sync() throws(StorageError) {
        syncs.add(1, ordering: .releasing)
        if failing.load(ordering: .acquiring), holdsFailure.load(ordering: .acquiring) {
            reachedFailure.signal()
            _ = proceed.wait(timeout: .now() + 30)
        }
        if failing.load(ordering: .acquiring) { throw StorageError(.queryFailed, "the test's disk fails") }
        successfulSyncs.add(1, ordering: .releasing)
    }
}

/// A database on the environment's file synced by `log`, with one table
/// `t (k TEXT PRIMARY KEY, v INTEGER)`; the caller closes it.
func tableDatabase(in environment: TestEnvironment, log: any SQLiteWALSync) throws -> SQLiteDatabase {
    let database = try SQLiteDatabase(
        path: environment.databasePath, readerCount: 1, busyTimeoutMilliseconds: 5000, log: log)
    do {
        try database.migrate { connection throws(StorageError) in
            try connection.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
        }
    } catch {
        database.close()
        throw error
    }
    return database
}
