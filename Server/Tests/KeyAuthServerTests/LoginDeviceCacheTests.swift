import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// The devices a login keeps in memory (``LoginDeviceCache``) and the counters that retire
/// them (``SQLiteDeviceChanges``): a change any keyauth process commits reaches the next login.
@Suite("The login's device cache and the device-change counters")
struct LoginDeviceCacheTests {
    /// An active device of alice's, as the storage tests make them.
    private static func device(_ kid: String, status: DeviceStatus.Stored = .active) -> DeviceRecord {
        StorageContract.device(kid, status: status)
    }

    /// A connection of the kind another program (the `sqlite3` shell) has: no triggers.
    private static func setStatusBehindTheServer(_ path: String, kid: String, to status: String) throws {
        let outsider = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 5000)
        try outsider.execute("UPDATE devices SET status = $1 WHERE kid = $2", [.text(status), .text(kid)])
    }

    /// keyauth's storage on the environment's file, with its database for statements of a test's
    /// own through keyauth's connection (and so its triggers).
    private static func openStorage(_ environment: TestEnvironment) throws -> (SQLiteDatabase, SQLStorage) {
        let database = try SQLiteDatabase(path: environment.databasePath, readerCount: 1, busyTimeoutMilliseconds: 5000)
        return (database, try SQLStorage(database: database, location: environment.databasePath, now: { 1_000 }))
    }

    @Test("a kept device is retired by a change that another instance on the file commits, before the next read")
    func anotherInstanceRetiresKeptDevices() throws {
        let environment = TestEnvironment()
        let server = try SQLiteStorage(path: environment.databasePath)
        defer { server.close() }
        // A second storage on the file: its own mapping and lock, as a second process has.
        let admin = try SQLiteStorage(path: environment.databasePath)
        defer { admin.close() }
        #expect(try server.insertDevice(Self.device("kid-a")))
        #expect(try server.loginDevice(kid: "kid-a")?.status == .active)

        // A change that counts nothing is not seen while the entry is young: it was kept.
        try Self.setStatusBehindTheServer(environment.databasePath, kid: "kid-a", to: "denied")
        #expect(try server.loginDevice(kid: "kid-a")?.status == .active)
        #expect(try server.device(kid: "kid-a")?.status == .denied)

        // A revocation through keyauth's storage, in the other instance, is seen at once.
        try Self.setStatusBehindTheServer(environment.databasePath, kid: "kid-a", to: "active")
        #expect(try admin.updateStatus(kid: "kid-a", from: .active, to: .revoked, at: 2_000))
        #expect(try server.loginDevice(kid: "kid-a")?.status == .revoked)
    }

    @Test("every column but last_login_at counts as a device change, as do inserts and deletes")
    func triggersCoverTheColumns() throws {
        let environment = TestEnvironment()
        let (database, storage) = try Self.openStorage(environment)
        defer { storage.close() }
        let changes = try #require(database.deviceChanges)
        func counted(_ body: () throws -> Void) rethrows -> UInt64 {
            let before = changes.started
            try body()
            #expect(changes.finished == changes.started, "a finished write left its change open")
            return changes.started - before
        }
        let inserted = try counted { _ = try storage.insertDevice(Self.device("kid-b")) }
        #expect(inserted == 1)
        let columns = try database.read { connection throws(StorageError) in
            try connection.execute("SELECT name FROM pragma_table_info('devices')").rows.compactMap { $0.text(0) }
        }
        #expect(columns.count >= 11)
        for column in columns {
            let sql = "UPDATE devices SET \(column) = \(column) WHERE kid = 'kid-b'"
            let count = try counted {
                _ = try database.write { connection throws(StorageError) in try connection.execute(sql) }
            }
            #expect(count == (column == "last_login_at" ? 0 : 1), "an update of \(column) counted \(count)")
        }
        // The batched login time is not a change; two statements in one transaction count once.
        let recorded = try counted {
            try storage.recordLogin(kid: "kid-b", at: 5_000)
            storage.close()
        }
        #expect(recorded == 0)
        #expect(try SQLiteStorage(path: environment.databasePath).device(kid: "kid-b")?.lastLoginAt == 5_000)
    }

    @Test("one transaction counts once, a rolled-back one is finished too, and a delete counts")
    func transactionsCountOnce() throws {
        let environment = TestEnvironment()
        let (database, storage) = try Self.openStorage(environment)
        defer { storage.close() }
        let changes = try #require(database.deviceChanges)
        #expect(try storage.insertDevice(Self.device("kid-c")))
        let before = changes.started
        _ = try database.write { connection throws(StorageError) in
            try connection.execute("UPDATE devices SET name = 'one' WHERE kid = 'kid-c'")
            try connection.execute("UPDATE devices SET name = 'two' WHERE kid = 'kid-c'")
        }
        #expect(changes.started == before + 1)
        let failed = StorageContract.errorCode { () throws(StorageError) in
            _ = try database.write { connection throws(StorageError) in
                try connection.execute("UPDATE devices SET status = 'revoked' WHERE kid = 'kid-c'")
                throw StorageError(.queryFailed, "changed my mind")
            }
        }
        #expect(failed == .queryFailed)
        // A failed write does not wait for its batch; an empty one joins it and waits.
        _ = try database.write { _ throws(StorageError) in }
        #expect(try storage.device(kid: "kid-c")?.status == .active)
        #expect(changes.started == before + 2)
        #expect(changes.finished == changes.started, "a rolled-back change was left open")
        _ = try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM devices WHERE kid = 'kid-c'")
        }
        #expect(changes.started == before + 3)
        #expect(changes.finished == changes.started)
    }

    @Test("a writer that died between its counts turns keeping off until the file is opened alone again")
    func deadWriterTurnsKeepingOff() throws {
        let environment = TestEnvironment()
        do {
            let server = try SQLiteStorage(path: environment.databasePath)
            defer { server.close() }
            #expect(try server.insertDevice(Self.device("kid-d")))
            // What a process killed after its trigger ran and before its commit leaves.
            let dead = try SQLiteDeviceChanges(databasePath: environment.databasePath)
            dead.noteChangeStarted()
            #expect(try server.loginDevice(kid: "kid-d")?.status == .active)
            try Self.setStatusBehindTheServer(environment.databasePath, kid: "kid-d", to: "revoked")
            #expect(
                try server.loginDevice(kid: "kid-d")?.status == .revoked, "a device was kept while a change was open")
            #expect(server.loginDevices?.count == 0)
        }
        // Every holder closed: the next one alone starts the counts equal, and keeps again.
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        let changes = try #require(reopened.database.deviceChanges)
        #expect(changes.started == changes.finished)
        #expect(try reopened.loginDevice(kid: "kid-d")?.status == .revoked)
        #expect(reopened.loginDevices?.count == 1)
    }

    @Test("a device-change file cut short while no server runs is set up again by the next")
    func truncatedFileIsSetUpAgain() throws {
        let environment = TestEnvironment()
        do {
            // Gone at the end of the scope: its file, and its lock, are closed.
            let first = try SQLiteStorage(path: environment.databasePath)
            #expect(try first.insertDevice(Self.device("kid-t")))
            first.close()
        }
        // What `truncate`, or a `cp` over the file before it writes, does.
        #expect(truncate(environment.databasePath + SQLiteDeviceChanges.suffix, 0) == 0)
        let server = try SQLiteStorage(path: environment.databasePath)
        defer { server.close() }
        let changes = try #require(server.database.deviceChanges)
        #expect(changes.started == changes.finished, "the reset left a change open")
        #expect(try server.loginDevice(kid: "kid-t")?.status == .active)
        #expect(server.loginDevices?.count == 1)
        let admin = try SQLiteStorage(path: environment.databasePath)
        defer { admin.close() }
        #expect(try admin.updateStatus(kid: "kid-t", from: .active, to: .revoked, at: 2_000))
        #expect(try server.loginDevice(kid: "kid-t")?.status == .revoked, "a change counted after the reset was missed")
    }

    @Test("a kept device whose change is committed but not on disk holds the login's answer until it is")
    func keptDeviceWaitsForTheDisk() throws {
        let environment = TestEnvironment()
        let (disk, database) = try environment.stallableDatabase()
        let storage = try SQLStorage(database: database, location: environment.databasePath, now: { 1_000 })
        defer { storage.close() }
        #expect(try storage.insertDevice(Self.device("kid-approved", status: .pending)))
        // An approval commits; its fsync waits on the held disk (released whatever fails, or the
        // storage's close would wait behind the stalled fsync).
        disk.hold()
        defer { disk.release() }
        let (approved, approval) = try DurabilityScope.run { () throws(StorageError) in
            try storage.updateStatus(kid: "kid-approved", from: .pending, to: .active, at: 1_100)
        }
        #expect(approved)
        #expect(disk.waitUntilStalled())
        // The first login reads the device (and keeps it); the second finds it kept. Both answers
        // state an approval that a crash now would undo: both wait for the disk.
        for login in ["read", "kept"] {
            let (device, scope) = try DurabilityScope.run { () throws(StorageError) in
                try storage.loginDevice(kid: "kid-approved")
            }
            #expect(device?.status == .active)
            guard case .pending = scope.outcome else {
                Issue.record("the \(login) login's answer was not held: \(scope.outcome)")
                continue
            }
        }
        disk.release()
        #expect(
            eventually {
                if case .durable = approval.outcome { true } else { false }
            })
        let (_, settled) = try DurabilityScope.run { () throws(StorageError) in
            try storage.loginDevice(kid: "kid-approved")
        }
        guard case .durable = settled.outcome else {
            Issue.record("once the disk is released the login's answer should go out: \(settled.outcome)")
            return
        }
    }

    @Test("entries expire, unknown kids and reads during a change are not kept, and the size is bounded")
    func cacheRules() throws {
        let environment = TestEnvironment()
        let changes = try SQLiteDeviceChanges(databasePath: environment.databasePath)
        let now = Atomic<UInt64>(1_000)
        let cache = LoginDeviceCache(
            changes: changes, capacity: 2, maximumAge: 100, clock: { now.load(ordering: .relaxed) })
        let reads = Mutex(0)
        func lookUp(_ kid: String, found: Bool = true) throws -> DeviceRecord? {
            try cache.device(kid: kid) { () throws(StorageError) in
                reads.withLock { $0 += 1 }
                return found ? Self.device(kid) : nil
            }
        }
        _ = try lookUp("one")
        _ = try lookUp("one")
        #expect(reads.withLock { $0 } == 1)
        now.store(1_100, ordering: .relaxed)
        _ = try lookUp("one")
        #expect(reads.withLock { $0 } == 2, "an entry outlived its maximum age")
        #expect(try lookUp("ghost", found: false) == nil)
        #expect(try lookUp("ghost", found: false) == nil)
        #expect(reads.withLock { $0 } == 4)
        changes.noteChangeStarted()
        _ = try lookUp("one")
        _ = try lookUp("one")
        #expect(reads.withLock { $0 } == 6, "a device read while a change was open was kept")
        changes.noteChangeFinished()
        for kid in ["one", "two", "three"] { _ = try lookUp(kid) }
        #expect(cache.count == 2)
    }

    @Test("the counter file must be private to the server's user")
    func counterFileMustBePrivate() throws {
        let environment = TestEnvironment()
        let path = environment.databasePath + SQLiteDeviceChanges.suffix
        #expect(FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o644]))
        let code = StorageContract.errorCode { () throws(StorageError) in
            _ = try SQLiteDeviceChanges(databasePath: environment.databasePath)
        }
        #expect(code == .unprotected)
        chmod(path, 0o600)
        let changes = try SQLiteDeviceChanges(databasePath: environment.databasePath)
        #expect(changes.started == changes.finished, "the reset left a change open")
    }

    @Test(
        "revocations by keyauth-server revoke, by the API, and approvals reach the server's next login, under load",
        .timeLimit(.minutes(5)))
    func adminCommandsReachTheNextLogin() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        let server = try KeyAuthServerProcess.started(
            name: "cached", database: database, in: environment.directory.path)
        defer { server.terminate() }
        let storage = try StorageFactory.open(database, creatingIfMissing: false)
        defer { storage.close() }
        @Sendable func api() -> TestAPI {
            TestAPI(server: server, clock: TestClock(ServerClock.now()), storage: storage)
        }
        func admin(_ command: String, _ kid: String) throws {
            let run = try KeyAuthServerProcess.runCommand([command, kid, "--db", database, "--config", "/dev/null"])
            #expect(run.status == 0, "\(command): \(run.error)")
        }
        // Logins of another device keep the server busy and its cache in use throughout.
        let busy = try ServerTestKeys.key("busy")
        #expect(try api().register(user: "busy", key: busy).status == 201)
        let load = BackgroundLogins()
        Thread {
            while !load.stop.load(ordering: .relaxed) {
                if (try? api().login(busy).status) != 200 { load.refused.add(1, ordering: .relaxed) }
            }
        }.start()
        defer { load.stop.store(true, ordering: .relaxed) }

        for round in 0..<4 {
            let first = try ServerTestKeys.key("round-\(round)-first")
            let second = try ServerTestKeys.key("round-\(round)-second")
            #expect(try api().register(user: "user-\(round)", key: first).status == 201)
            #expect(try api().register(user: "user-\(round)", key: second).status == 202)
            for _ in 0..<3 {
                #expect(try api().login(first).status == 200)
                #expect(try api().login(second).json?["error"]?.stringValue == "authorization_pending")
            }
            try admin("approve", second.publicKey.fingerprint)
            let token = try api().accessToken(second)
            // The admin command's migration retired every entry: keep `first` again.
            #expect(try api().login(first).status == 200)
            // Revoked by the admin command, or through the server itself (its own triggers).
            if round.isMultiple(of: 2) {
                try admin("revoke", first.publicKey.fingerprint)
            } else {
                let path = "/v1/devices/\(first.publicKey.fingerprint)"
                #expect(try api().authorized("DELETE", path, token: token).status == 204)
            }
            let refused = try api().login(first)
            #expect(refused.status == 400, "round \(round): a revoked device logged in")
            #expect(refused.json?["error"]?.stringValue == "invalid_grant")
        }
        load.stop.store(true, ordering: .relaxed)
        #expect(load.refused.load(ordering: .relaxed) == 0)
    }

    /// Preloaded into an admin command: the process kills itself at its first write to the
    /// database's log, that is inside its first commit, after its triggers counted the change as
    /// started and before it could count it as finished.
    private static let dieAtLogWrite = """
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <signal.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/types.h>
        #include <unistd.h>

        static void die_if_log(int fd) {
            char link[64], path[4096];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, path, sizeof path - 1);
            if (n > 4 && memcmp(path + n - 4, "-wal", 4) == 0) kill(getpid(), SIGKILL);
        }

        ssize_t pwrite64(int fd, const void *buffer, size_t count, off_t offset) {
            static ssize_t (*real)(int, const void *, size_t, off_t);
            if (!real) real = dlsym(RTLD_NEXT, "pwrite64");
            die_if_log(fd);
            return real(fd, buffer, count, offset);
        }

        ssize_t pwrite(int fd, const void *buffer, size_t count, off_t offset) {
            static ssize_t (*real)(int, const void *, size_t, off_t);
            if (!real) real = dlsym(RTLD_NEXT, "pwrite");
            die_if_log(fd);
            return real(fd, buffer, count, offset);
        }

        ssize_t write(int fd, const void *buffer, size_t count) {
            static ssize_t (*real)(int, const void *, size_t);
            if (!real) real = dlsym(RTLD_NEXT, "write");
            die_if_log(fd);
            return real(fd, buffer, count);
        }
        """

    @Test(
        "an admin command killed inside its commit loses nothing and turns keeping off until every process stops",
        .timeLimit(.minutes(10)))
    func killedAdminCommandTurnsKeepingOff() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        let library = try PreloadLibrary.compile(
            Self.dieAtLogWrite, named: "die-at-log-write", in: environment.directory.path)
        do {
            let server = try KeyAuthServerProcess.started(
                name: "kept", database: database, in: environment.directory.path)
            defer { server.terminate() }
            let storage = try StorageFactory.open(database, creatingIfMissing: false)
            defer { storage.close() }
            let api = TestAPI(server: server, clock: environment.clock, storage: storage)
            let key = try ServerTestKeys.key("killed-revoke")
            let kid = key.publicKey.fingerprint
            #expect(try api.register(user: "alice", key: key).status == 201)
            #expect(try api.login(key).status == 200)

            let killed = try KeyAuthServerProcess.runCommand(
                ["revoke", kid, "--db", database, "--config", "/dev/null"], environment: ["LD_PRELOAD": library])
            #expect(killed.status == 128 + SIGKILL, "the preloaded revoke ended with \(killed.status): \(killed.error)")
            let changes = try #require((storage as? SQLStorage)?.database.deviceChanges)
            #expect(changes.started == changes.finished + 1, "the killed command left no open count")

            // Nothing was lost or half-done: the device is active and logs in.
            #expect(try api.login(key).status == 200)
            // The server keeps nothing now: a change no keyauth process counts reaches the next
            // login.
            try Self.setStatusBehindTheServer(database, kid: kid, to: "revoked")
            #expect(try api.login(key).status == 400, "the server kept a device while a count was open")
            #expect(server.terminate() == 0)
        }
        // Every process has let go of the file: the next one alone starts the counts again.
        let fresh = try SQLiteDeviceChanges(databasePath: database)
        #expect(fresh.started == fresh.finished)
    }
}

/// What a test's thread of background logins shares with the test.
private final class BackgroundLogins: Sendable {
    let stop = Atomic<Bool>(false)
    let refused = Atomic<Int>(0)
}
