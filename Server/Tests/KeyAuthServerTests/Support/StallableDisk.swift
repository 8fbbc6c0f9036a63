import Glibc
import Synchronization

@testable import KeyAuthServer

/// A disk whose fsync a test can stall: the sync of a SQLite log that waits while the test holds
/// it, as a slow disk would, then does the real sync. With the disk held, a batch stays in its
/// fsync, the next batch fills, and every response that depends on either stays held.
final class StallableDisk: SQLiteWALSync {
    private struct State {
        var held = false
        /// Syncs waiting for the disk to be released.
        var stalled = 0
    }

    private let real: any SQLiteWALSync
    private let state = Mutex(State())

    init(_ real: any SQLiteWALSync) {
        self.real = real
    }

    /// Makes every sync from now on wait until ``release()``.
    func hold() {
        state.withLock { $0.held = true }
    }

    /// Lets the waiting syncs and later ones go.
    func release() {
        state.withLock { $0.held = false }
    }

    /// Waits until a sync is stalled on the held disk; false after 20 s.
    func waitUntilStalled() -> Bool {
        let deadline = ServerClock.monotonicNanoseconds() + 20_000_000_000
        while state.withLock({ $0.stalled == 0 }) {
            guard ServerClock.monotonicNanoseconds() < deadline else { return false }
            usleep(500)
        }
        return true
    }

    func sync() throws(StorageError) {
        state.withLock { $0.stalled += 1 }
        while state.withLock({ $0.held }) { usleep(200) }
        state.withLock { $0.stalled -= 1 }
        try real.sync()
    }
}

extension TestEnvironment {
    /// SQLite storage on this environment's database whose log's fsync the test can stall, with
    /// its database (for writes of the test's own) and the disk.
    func stallableStorage() throws -> (storage: SQLStorage, database: SQLiteDatabase, disk: StallableDisk) {
        let disk = StallableDisk(SQLiteWALFile(databasePath: databasePath))
        let database = try SQLiteDatabase(path: databasePath, readerCount: 2, busyTimeoutMilliseconds: 5000, log: disk)
        let storage = try SQLStorage(database: database, location: databasePath, now: clock.closure)
        return (storage, database, disk)
    }
}

extension TestEnvironment {
    /// keyauth's SQLite database on the environment's file, with the disk under its log, whose
    /// fsync the test can stall.
    func stallableDatabase() throws(StorageError) -> (StallableDisk, SQLiteDatabase) {
        let disk = StallableDisk(SQLiteWALFile(databasePath: databasePath))
        let database = try SQLiteDatabase(path: databasePath, readerCount: 1, busyTimeoutMilliseconds: 5000, log: disk)
        return (disk, database)
    }
}
