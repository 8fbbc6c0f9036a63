import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// The replay cache in each mode, on a real SQLite file: what a clean stop hands on, what a
/// crash (a start without a stop) costs, and what switching modes keeps.
@Suite("Replay guard")
struct ReplayGuardTests {
    static let now: Int64 = 1_800_000_000
    static let kid = "Xt8ExampleKeyIdOfFortyThreeCharactersLong12"

    /// Claims one fresh token (issued now, valid 5 minutes).
    private static func claim(_ guardian: ReplayGuard, _ jti: String, storage: any ServerStorage, at time: Int64 = now)
        throws -> ReplayClaim
    {
        try guardian.claim(keyID: kid, jti: jti, issuedAt: time, expiresAt: time + 310, storage: storage, now: time)
    }

    /// Claims each `jti` at `time` and expects its outcome.
    private static func expectClaims(
        _ guardian: ReplayGuard, at time: Int64, _ outcomes: KeyValuePairs<String, ReplayClaim>,
        storage: any ServerStorage, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        for (jti, outcome) in outcomes {
            #expect(try claim(guardian, jti, storage: storage, at: time) == outcome, sourceLocation: sourceLocation)
        }
    }

    /// The storage at `path` opened again after a memory cache started on it at ``now`` accepted
    /// the token `a` and died without stopping.
    private static func afterCrash(_ path: String) throws -> SQLiteStorage {
        let storage = try SQLiteStorage(path: path)
        let first = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
        #expect(try Self.claim(first, "a", storage: storage) == .accepted)
        storage.close()  // no stop: the process died
        return try SQLiteStorage(path: path)
    }

    private static func withStorage(_ body: (String) throws -> Void) throws {
        let directory = TemporaryDirectory("keyauth-replay")
        defer { directory.remove() }
        try body(directory.path + "/keyauth-server.db")
    }

    @Test("in memory, a jti is accepted once")
    func memoryClaims() throws {
        try Self.withStorage { path in
            let storage = try SQLiteStorage(path: path)
            defer { storage.close() }
            let guardian = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            #expect(guardian.horizon == nil)
            #expect(try Self.claim(guardian, "a", storage: storage) == .accepted)
            #expect(try Self.claim(guardian, "a", storage: storage) == .replayed)
            #expect(try Self.claim(guardian, "b", storage: storage) == .accepted)
            // Another key's jti of the same text is another entry.
            #expect(
                try guardian.claim(
                    keyID: "dpop " + Self.kid, jti: "a", issuedAt: Self.now, expiresAt: Self.now + 60, storage: storage,
                    now: Self.now) == .accepted)
            // Nothing was written per claim: the table holds only the running marker and the lease.
            #expect(try Set(storage.replaySnapshot().map(\.name)) == [ReplayGuard.runningMarker, ReplayGuard.leaseRow])
            #expect(try storage.claimedJTIs(expiringAfter: 0).isEmpty)
        }
    }

    @Test("a clean stop hands every unexpired claim to the next start, which needs no window")
    func cleanRestart() throws {
        try Self.withStorage { path in
            var storage = try SQLiteStorage(path: path)
            let first = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            for jti in ["a", "b", "c"] { #expect(try Self.claim(first, jti, storage: storage) == .accepted) }
            try first.stop(storage: storage, now: Self.now + 5)
            try first.stop(storage: storage, now: Self.now + 5)  // once
            storage.close()

            storage = try SQLiteStorage(path: path)
            defer { storage.close() }
            let second = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now + 6)
            #expect(second.horizon == nil)
            for jti in ["a", "b", "c"] {
                #expect(try Self.claim(second, jti, storage: storage, at: Self.now + 6) == .replayed)
            }
            #expect(try Self.claim(second, "d", storage: storage, at: Self.now + 6) == .accepted)
            // The snapshot was taken back: only the running marker and the new lease are left.
            #expect(try Set(storage.replaySnapshot().map(\.name)) == [ReplayGuard.runningMarker, ReplayGuard.leaseRow])
        }
    }

    @Test("after a crash, tokens issued up to the start + 10 s are refused, later ones accepted")
    func crashRestart() throws {
        try Self.withStorage { path in
            let storage = try Self.afterCrash(path)
            defer { storage.close() }
            // After the dead server's lease (its start + 5 s) ended: the horizon is this start's.
            let start = Self.now + ReplayGuard.leaseSeconds + 3
            let second = try ReplayGuard.start(mode: .memory, storage: storage, now: start)
            #expect(second.horizon == start + 10)
            // The accepted token, and anything signed up to the horizon, whatever its jti.
            #expect(try Self.claim(second, "a", storage: storage, at: start) == .issuedBeforeRestart)
            #expect(
                try second.claim(
                    keyID: Self.kid, jti: "new", issuedAt: start + 10, expiresAt: start + 300, storage: storage,
                    now: start + 1) == .issuedBeforeRestart)
            #expect(second.secondsUntilPastHorizon(now: start + 1) == 10)
            #expect(try Self.claim(second, "later", storage: storage, at: start + 11) == .accepted)
            #expect(try Self.claim(second, "later", storage: storage, at: start + 11) == .replayed)
            #expect(second.secondsUntilPastHorizon(now: start + 11) == 0)
        }
    }

    @Test("the cleanup keeps a crash's horizon for the starts that still need it, and purges only entries")
    func horizonOutlivesTheCleanup() throws {
        try Self.withStorage { path in
            let storage = try Self.afterCrash(path)
            defer { storage.close() }
            let start = Self.now + ReplayGuard.leaseSeconds + 3
            let second = try ReplayGuard.start(mode: .database, storage: storage, now: start)
            let horizon = try #require(second.horizon)
            // The cleanup a minute past the horizon: a token of the dead server's could still be valid.
            _ = try storage.purgeExpiredJTIs(now: horizon + 61)
            let third = try ReplayGuard.start(mode: .database, storage: storage, now: horizon + 100)
            #expect(third.horizon == horizon)
            #expect(
                try third.claim(
                    keyID: Self.kid, jti: "late", issuedAt: horizon, expiresAt: horizon + 300, storage: storage,
                    now: horizon + 100) == .issuedBeforeRestart)
        }
    }

    @Test("a memory cache takes over the claims a database-mode server recorded, and gives its own back")
    func switchingModes() throws {
        try Self.withStorage { path in
            var storage = try SQLiteStorage(path: path)
            let database = try ReplayGuard.start(mode: .database, storage: storage, now: Self.now)
            #expect(try Self.claim(database, "db", storage: storage) == .accepted)
            storage.close()

            storage = try SQLiteStorage(path: path)
            let memory = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now + 1)
            #expect(memory.horizon == nil)
            try Self.expectClaims(memory, at: Self.now + 1, ["db": .replayed, "mem": .accepted], storage: storage)
            try memory.stop(storage: storage, now: Self.now + 2)
            storage.close()

            // Back to the database: the memory cache's entries still count.
            storage = try SQLiteStorage(path: path)
            let again = try ReplayGuard.start(mode: .database, storage: storage, now: Self.now + 3)
            #expect(again.horizon == nil)
            try Self.expectClaims(
                again, at: Self.now + 3, ["mem": .replayed, "db": .replayed, "fresh": .accepted], storage: storage)
            storage.close()

            // A memory cache that crashed, then a database-mode start: the window applies.
            storage = try SQLiteStorage(path: path)
            _ = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now + 4)
            storage.close()
            storage = try SQLiteStorage(path: path)
            let afterCrash = try ReplayGuard.start(mode: .database, storage: storage, now: Self.now + 5)
            // Its lease, written at its start, ended at + 9: the horizon is that, not this start.
            #expect(afterCrash.horizon == Self.now + 19)
            #expect(try Self.claim(afterCrash, "x", storage: storage, at: Self.now + 5) == .issuedBeforeRestart)
            storage.close()

            // Restarted again at once (this one left no marker): the horizon still holds, until
            // no token issued before it can be valid.
            storage = try SQLiteStorage(path: path)
            defer { storage.close() }
            let soonAfter = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now + 7)
            #expect(soonAfter.horizon == Self.now + 19)
            #expect(try Self.claim(soonAfter, "y", storage: storage, at: Self.now + 7) == .issuedBeforeRestart)
            try soonAfter.stop(storage: storage, now: Self.now + 8)
            let muchLater = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now + 19 + 331)
            #expect(muchLater.horizon == nil)
        }
    }

    @Test("a memory cache claims only within a lease written before, renewed by a claim that finds it ended")
    func lease() throws {
        try Self.withStorage { path in
            let storage = try SQLiteStorage(path: path)
            let guardian = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            let lease = { try storage.replaySnapshot().first { $0.name == ReplayGuard.leaseRow }?.expiresAt }
            #expect(try lease() == Self.now + ReplayGuard.leaseSeconds, "written at the start")
            // The timer's renewal moves it on; a claim within it writes nothing.
            try guardian.renewLease(storage: storage, now: Self.now + 2)
            #expect(try lease() == Self.now + 7)
            #expect(try Self.claim(guardian, "a", storage: storage, at: Self.now + 6) == .accepted)
            #expect(try lease() == Self.now + 7)
            // Past it (no renewal came, or the clock jumped), the claim renews first.
            #expect(try Self.claim(guardian, "b", storage: storage, at: Self.now + 100) == .accepted)
            #expect(try lease() == Self.now + 105)
            // Never moved back, in storage or in memory: a clock set back still claims.
            try guardian.renewLease(storage: storage, now: Self.now + 50)
            #expect(try lease() == Self.now + 105)
            #expect(try Self.claim(guardian, "c", storage: storage, at: Self.now + 60) == .accepted)
            // A renewal that cannot be written: no claim past the lease.
            storage.close()
            #expect(throws: StorageError.self) { try Self.claim(guardian, "d", storage: storage, at: Self.now + 200) }
            #expect(try Self.claim(guardian, "e", storage: storage, at: Self.now + 104) == .accepted)
        }
    }

    @Test("a login that renews a lapsed lease waits until the lease is durable before it claims")
    func leaseRenewedByALoginIsDurableFirst() throws {
        let environment = TestEnvironment()
        let (storage, database, disk) = try environment.stallableStorage()
        defer { database.close() }
        let guardian = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
        // A batch stalled in its fsync: a write made in a request's scope now waits in the next one.
        disk.hold()
        _ = try DurabilityScope.run { try database.write { _ in () } }
        #expect(disk.waitUntilStalled())
        let lapsed = Self.now + ReplayGuard.leaseSeconds + 1
        let outcome = Mutex<ReplayClaim?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let claimed = try? DurabilityScope.run { try Self.claim(guardian, "a", storage: storage, at: lapsed) }
            outcome.withLock { $0 = claimed?.0 }
            done.signal()
        }.start()
        // In the login's scope the renewal would return at once, its batch open, and the claim
        // would be accepted under a lease that a crash now would lose.
        usleep(300_000)
        #expect(outcome.withLock { $0 } == nil)
        disk.release()
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(outcome.withLock { $0 } == .accepted)
    }

    @Test("a clock set back across a crash restart: the dead server's lease, not the start, makes the horizon")
    func crashWithClockSetBack() throws {
        try Self.withStorage { path in
            var storage = try SQLiteStorage(path: path)
            let first = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            try first.renewLease(storage: storage, now: Self.now + 4)
            #expect(try Self.claim(first, "a", storage: storage, at: Self.now + 4) == .accepted)
            storage.close()  // the process died

            // Restarted with the clock 60 s behind. Before the lease, the horizon was this
            // start + 10 s, and "a" (issued at + 4) was accepted again once the clock caught up.
            storage = try SQLiteStorage(path: path)
            defer { storage.close() }
            let start = Self.now - 60
            let second = try ReplayGuard.start(mode: .memory, storage: storage, now: start)
            #expect(second.horizon == Self.now + 4 + ReplayGuard.leaseSeconds + 10)
            #expect(try Self.claim(second, "a", storage: storage, at: Self.now + 10) == .issuedBeforeRestart)
            #expect(second.secondsUntilPastHorizon(now: start) == 80)
            #expect(try Self.claim(second, "fresh", storage: storage, at: Self.now + 20) == .accepted)
        }
    }

    @Test("a clock set back across a clean stop does not reopen the claims the stopped cache had forgotten")
    func cleanStopWithClockSetBack() throws {
        try Self.withStorage { path in
            var storage = try SQLiteStorage(path: path)
            let first = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            #expect(try Self.claim(first, "a", storage: storage) == .accepted)
            // 400 s on, a claim takes a's bucket out; the stop hands on only what is unexpired.
            #expect(try Self.claim(first, "later", storage: storage, at: Self.now + 400) == .accepted)
            try first.stop(storage: storage, now: Self.now + 400)
            storage.close()

            // Restarted with the clock back at the start: "a" is within its lifetime again.
            // Before, the new cache knew nothing of it and accepted it a second time.
            storage = try SQLiteStorage(path: path)
            defer { storage.close() }
            let second = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            #expect(second.horizon == nil)
            #expect(try Self.claim(second, "a", storage: storage) == .forgotten)
            #expect(try Self.claim(second, "later", storage: storage, at: Self.now + 400) == .replayed)
            #expect(try Self.claim(second, "fresh", storage: storage, at: Self.now + 400) == .accepted)
        }
    }

    @Test("entries are forgotten once their bucket has expired, and left out of a snapshot")
    func expiry() {
        let set = AcceptedTokenSet()
        let entry = AcceptedTokenSet.entry(keyID: Self.kid, jti: "a")
        #expect(entry == AcceptedTokenSet.entry(keyID: Self.kid, jti: "a"))
        #expect(entry != AcceptedTokenSet.entry(keyID: Self.kid, jti: "b"))
        #expect(set.insert(entry, expiresAt: Self.now + 40, now: Self.now) == .inserted)
        #expect(set.insert(entry, expiresAt: Self.now + 40, now: Self.now + 39) == .present)
        #expect(set.snapshot(now: Self.now + 39).flatMap(\.entries) == [entry])
        // Another insert well after the expiry purges the old bucket.
        #expect(set.insert(1, expiresAt: Self.now + 500, now: Self.now + 200) == .inserted)
        #expect(!set.contains(entry))
        #expect(set.snapshot(now: Self.now + 200).flatMap(\.entries) == [1])
        // The wall clock set back to before the first expiry: the entry is gone, and so is any
        // way to tell that it was accepted, so it is not taken again.
        #expect(set.insert(entry, expiresAt: Self.now + 40, now: Self.now + 10) == .forgotten)
        #expect(!set.contains(entry))
    }

    @Test("a token whose claim was forgotten is refused after the clock is set back, in either mode")
    func clockSetBack() throws {
        try Self.withStorage { path in
            let storage = try SQLiteStorage(path: path)
            defer { storage.close() }
            // Memory: a's claim goes with its bucket once the clock has passed its expiry.
            let memory = try ReplayGuard.start(mode: .memory, storage: storage, now: Self.now)
            #expect(try Self.claim(memory, "a", storage: storage) == .accepted)
            #expect(try Self.claim(memory, "later", storage: storage, at: Self.now + 400) == .accepted)
            // Set back by 400 s: a is within its lifetime again, and was used.
            #expect(try Self.claim(memory, "a", storage: storage) == .forgotten)
            // Fresh tokens are refused too while they expire before the claims remembered (the
            // price of a clock set back further than a token's lifetime), and accepted after.
            #expect(memory.forgetsBefore > Self.now + 360)
            #expect(memory.forgetsBefore <= Self.now + 400)
            #expect(try Self.claim(memory, "b", storage: storage, at: Self.now + 50) == .forgotten)
            #expect(try Self.claim(memory, "b", storage: storage, at: Self.now + 100) == .accepted)
            try memory.stop(storage: storage, now: Self.now + 100)

            // Database: the cleanup deleted the claims expiring before its horizon.
            let database = try ReplayGuard.start(mode: .database, storage: storage, now: Self.now + 100)
            #expect(try Self.claim(database, "c", storage: storage, at: Self.now + 100) == .accepted)
            try database.forgetsClaims(expiringBefore: Self.now + 500, storage: storage)
            _ = try storage.purgeExpiredJTIs(now: Self.now + 500)
            #expect(database.forgetsBefore == Self.now + 500)
            // The row survives the purge it came before.
            #expect(
                try storage.replaySnapshot().first { $0.name == ReplayGuard.forgottenRow }?.expiresAt == Self.now + 500)
            #expect(try Self.claim(database, "c", storage: storage, at: Self.now + 100) == .forgotten)
            #expect(try Self.claim(database, "d", storage: storage, at: Self.now + 200) == .accepted)
            // And across a restart with the clock still back: the cleanup wrote its horizon down
            // before purging. Before, the restarted server had forgotten it, and took c again.
            let restarted = try ReplayGuard.start(mode: .database, storage: storage, now: Self.now + 100)
            #expect(restarted.forgetsBefore == Self.now + 500)
            #expect(try Self.claim(restarted, "c", storage: storage, at: Self.now + 100) == .forgotten)
        }
    }

    @Test("a snapshot's entry rows are 16 lowercase hexadecimal digits, zeros first, after the markers")
    func snapshotRows() {
        #expect(ReplaySnapshot.name(of: 0) == "0000000000000000")
        #expect(ReplaySnapshot.name(of: 0xab) == "00000000000000ab")
        #expect(ReplaySnapshot.name(of: .max) == "ffffffffffffffff")
        #expect(ReplaySnapshot.name(of: 0x0123_4567_89ab_cdef) == String(0x0123_4567_89ab_cdef, radix: 16).leftPadded)
        let marker = ReplaySnapshotRow(name: "stopped", expiresAt: 9)
        let snapshot = ReplaySnapshot(markers: [marker], buckets: [(expiresAt: 63, entries: [1, 2]), (127, [3])])
        let rows = Array(snapshot.rows)
        #expect(rows.first == marker)
        #expect(Set(rows.dropFirst().map(\.name)) == ["0000000000000001", "0000000000000002", "0000000000000003"])
        #expect(rows.filter { $0.expiresAt == 63 }.count == 2)
    }

    @Test("a memory server's lock excludes any other server on the file; database servers share it")
    func serveLock() throws {
        try Self.withStorage { path in
            FileManager.default.createFile(atPath: path, contents: nil)
            do {
                let exclusive = try SQLiteServeLock(path: path, exclusive: true)
                #expect(throws: StorageError.self) { try SQLiteServeLock(path: path, exclusive: false) }
                #expect(throws: StorageError.self) { try SQLiteServeLock(path: path, exclusive: true) }
                withExtendedLifetime(exclusive) {}
            }
            do {
                let shared = try SQLiteServeLock(path: path, exclusive: false)
                let another = try SQLiteServeLock(path: path, exclusive: false)
                #expect(throws: StorageError.self) { try SQLiteServeLock(path: path, exclusive: true) }
                withExtendedLifetime((shared, another)) {}
            }
            // Released with the last holder.
            _ = try SQLiteServeLock(path: path, exclusive: true)
        }
    }
}

extension String {
    /// Zeros before the string, to 16 characters.
    fileprivate var leftPadded: String { String(repeating: "0", count: max(0, 16 - count)) + self }
}
