import Dispatch
import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// A write whose sync failed is never answered as durable: not when a later batch succeeds, and
/// not when a later `fdatasync` of the log returns 0 as Linux's can after a writeback error.
@Suite("Durability after a failed sync", .timeLimit(.minutes(5)))
struct DurabilityFailureTests {
    @Test("a scope that wrote in a batch whose sync failed stays failed when its next batch succeeds")
    func failedBatchIsNotCoveredByALaterOne() throws {
        let environment = TestEnvironment()
        let (database, disk) = try FailingDisk.database(in: environment)
        defer { database.close() }
        let (_, scope) = try DurabilityScope.run { () throws(StorageError) in
            disk.failing.store(true, ordering: .releasing)
            // A revocation, say: it runs in a batch whose sync fails.
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('revoked', 1)")
            }
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline, !Self.hasFailed(DurabilityScope.current) { usleep(1000) }
            #expect(Self.hasFailed(DurabilityScope.current), "the first batch's sync did not fail")
            disk.failing.store(false, ordering: .releasing)
            // Then the same request writes again, in a batch that succeeds.
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('audited', 2)")
            }
        }
        #expect(try Self.settledFailure(of: scope) != nil, "the answer would have been sent as durable")
        #expect(Self.hasFailed(scope))
    }

    @Test("after one failed sync of the SQLite log every later sync fails, even one the kernel lets pass")
    func logSyncFailureSticks() throws {
        let directory = TemporaryDirectory("keyauth-wal-sync")
        defer { directory.remove() }
        let database = directory.path + "/server.db"
        FileManager.default.createFile(atPath: database, contents: nil)
        // fdatasync of /dev/null fails (EINVAL), as a disk's writeback error makes it fail.
        try FileManager.default.createSymbolicLink(atPath: database + "-wal", withDestinationPath: "/dev/null")
        let log = SQLiteWALFile(databasePath: database)
        #expect(throws: StorageError.self) { try log.sync() }
        // A log that syncs fine now: the earlier failure may have dropped pages the new sync
        // does not cover, so it still fails, and says to restart.
        try FileManager.default.removeItem(atPath: database + "-wal")
        FileManager.default.createFile(atPath: database + "-wal", contents: Data([1]))
        do throws(StorageError) {
            try log.sync()
            Issue.record("a sync after a failed one passed")
        } catch {
            #expect(error.message.contains("restart keyauth-server"), "\(error.message)")
        }
        #expect(log.lostDurability != nil)
        // A fresh log file object (a restart) syncs again.
        try SQLiteWALFile(databasePath: database).sync()
    }

    @Test("once a sync failed for good, a write fails before it begins: nothing is committed for readers to see")
    func noWriteBeginsAfterLostDurability() throws {
        let environment = TestEnvironment()
        let disk = LostDisk()
        let database = try tableDatabase(in: environment, log: disk)
        defer { database.close() }
        disk.lost.store(true, ordering: .releasing)
        #expect(throws: StorageError.self) {
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('first', 1)")
            }
        }
        let syncs = disk.syncs.load(ordering: .acquiring)
        #expect(throws: StorageError.self) {
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('second', 2)")
            }
        }
        // The second never reached COMMIT, nor the disk.
        #expect(disk.syncs.load(ordering: .acquiring) == syncs)
        let keys = try database.read { connection throws(StorageError) in
            try connection.query("SELECT k FROM t ORDER BY k", []) { row throws(StorageError) in row.text(0) ?? "" }
        }
        #expect(!keys.contains("second"), "\(keys)")
    }

    @Test("a batch open while the sync before it fails for good is rolled back: readers never see it")
    func openBatchIsRolledBack() throws {
        let environment = TestEnvironment()
        let disk = LostDisk()
        let database = try tableDatabase(in: environment, log: disk)
        defer { database.close() }
        disk.held.store(true, ordering: .releasing)
        let before = disk.syncs.load(ordering: .acquiring)
        let (_, scope) = try DurabilityScope.run { () throws(StorageError) in
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('syncing', 1)")
            }
            // The first batch is in its sync; the next write opens the next batch.
            let deadline = Date().addingTimeInterval(20)
            while disk.syncs.load(ordering: .acquiring) == before, Date() < deadline { usleep(1000) }
            try database.write { connection throws(StorageError) in
                try connection.execute("INSERT INTO t (k, v) VALUES ('open', 2)")
            }
        }
        disk.lost.store(true, ordering: .releasing)
        disk.held.store(false, ordering: .releasing)
        #expect(try Self.settledFailure(of: scope) != nil)
        let keys = try database.read { connection throws(StorageError) in
            try connection.query("SELECT k FROM t", []) { row throws(StorageError) in row.text(0) ?? "" }
        }
        #expect(!keys.contains("open"), "\(keys)")
    }

    /// The error `scope` settles with (nil when durable), waiting up to 30 s for it.
    private static func settledFailure(of scope: DurabilityScope) throws -> StorageError? {
        let settled = DispatchSemaphore(value: 0)
        let failure = Mutex<StorageError?>(nil)
        scope.whenDurable { error in
            failure.withLock { $0 = error }
            settled.signal()
        }
        try #require(settled.wait(timeout: .now() + 30) == .success, "the scope never settled")
        return failure.withLock { $0 }
    }

    private static func hasFailed(_ scope: DurabilityScope?) -> Bool {
        guard case .failed = scope?.outcome else { return false }
        return true
    }
}

/// A disk whose sync fails for good once ``lost`` is set, as ``SQLiteWALFile`` does after a
/// failed `fdatasync`; while ``held``, a sync waits.
final class LostDisk: SQLiteWALSync {
    let lost = Atomic<Bool>(false)
    let held = Atomic<Bool>(false)
    let syncs = Atomic<Int>(0)

    func sync() throws(StorageError) {
        syncs.add(1, ordering: .releasing)
        let deadline = Date().addingTimeInterval(30)
        while held.load(ordering: .acquiring), Date() < deadline { usleep(1000) }
        if let failure = lostDurability { throw failure }
    }

    var lostDurability: StorageError? {
        lost.load(ordering: .acquiring) ? StorageError(.queryFailed, "the test's disk lost writes") : nil
    }
}
