import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("keyauth-server backup", .timeLimit(.minutes(10)))
struct BackupTests {
    /// A test API over sockets to a server process, with storage opened on its database.
    private func api(_ server: KeyAuthServerProcess, database: String, clock: TestClock) throws -> TestAPI {
        TestAPI(server: server, clock: clock, storage: try StorageFactory.open(database, creatingIfMissing: false))
    }

    private func serve(_ name: String, _ database: String, _ directory: String) throws -> KeyAuthServerProcess {
        // A backup of a memory replay cache restores like a crash (logins wait out the restart
        // rule, as CrashDurabilityTests shows); the copy is the point here.
        try KeyAuthServerProcess.started(
            name: name, database: database, in: directory, extraArguments: ["--replay-cache", "database"])
    }

    @Test("a backup of a live server's database restores, and a device registered before it logs in")
    func restoresLiveBackup() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let directory = environment.directory.path
        let live = try serve("live", environment.databasePath, directory)
        defer { live.terminate() }
        let before = try api(live, database: environment.databasePath, clock: environment.clock)
        defer { before.storage.close() }
        let kept = try ServerTestKeys.key("alice-1")
        let lost = try ServerTestKeys.key("bob-1")
        #expect(try before.register(user: "alice", key: kept).status == 201)
        #expect(try before.login(kept).status == 200)

        let backup = directory + "/backup.db"
        let result = try KeyAuthServerProcess.runCommand(
            ["backup", backup, "--db", environment.databasePath, "--config", "/dev/null"])
        #expect(result.status == 0, "\(result.error)")
        #expect(result.error.hasPrefix("keyauth-server: backed up \(environment.databasePath) to \(backup) ("))
        #expect(fileMode(backup) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: backup + "-wal"))
        // Made under a name of its own and linked once whole: nothing else is left beside it.
        let beside = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("backup.db") }
        #expect(beside == ["backup.db"])
        // Registered after the backup: not in it.
        #expect(try before.register(user: "bob", key: lost).status == 201)
        // The server still serves after the backup.
        #expect(try before.login(kept).status == 200)
        #expect(live.terminate() == 0)

        // Restore: the copy as the database of a new server.
        let restored = directory + "/restored.db"
        try FileManager.default.copyItem(atPath: backup, toPath: restored)
        chmod(restored, 0o600)
        let server = try serve("restored", restored, directory)
        defer { server.terminate() }
        let after = try api(server, database: restored, clock: environment.clock)
        defer { after.storage.close() }
        // A restored copy starts as after a crash: what was signed before its start is refused.
        #expect(try after.login(kept).errorDescription?.contains("issued before the server restarted") == true)
        Self.signAfterTheRestartRule(environment.clock)
        let login = try after.login(kept)
        #expect(login.status == 200)
        #expect(login.json?["access_token"]?.stringValue != nil)
        #expect(try after.login(lost).errorCode == "invalid_grant")
    }

    /// A test API over sockets to `server`, started with `--issuer` the shared issuer.
    private static func api(_ server: KeyAuthServerProcess, _ environment: TestEnvironment) throws -> TestAPI {
        TestAPI(
            transport: SocketTransport(port: server.port), issuer: TestEnvironment.issuer, clock: environment.clock,
            storage: try StorageFactory.open(environment.databasePath, creatingIfMissing: false))
    }

    /// Waits past the second the server started in, then sets `clock` (which signs the test's
    /// assertions) at the last moment the server accepts, 10 s ahead: later than its restart
    /// rule refuses.
    private static func signAfterTheRestartRule(_ clock: TestClock) {
        let started = ServerClock.now()
        while ServerClock.now() == started { usleep(50_000) }
        clock.advance(by: ServerClock.now() + 10 - clock.now)
    }

    @Test(
        "a restored backup refuses an assertion accepted after the backup, whatever the replay cache, even of a stopped server",
        arguments: ["memory", "database"])
    func restoredBackupRefusesLaterAssertions(_ replayCache: String) throws {
        // One issuer for the three servers, which listen on different ports.
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let directory = environment.directory.path
        let first = try KeyAuthServerProcess.started(
            name: "first", database: environment.databasePath, in: directory,
            extraArguments: ["--replay-cache", replayCache, "--issuer", TestEnvironment.issuer])
        let key = try ServerTestKeys.key("alice-1")
        let registering = try Self.api(first, environment)
        #expect(try registering.register(user: "alice", key: key).status == 201)
        registering.storage.close()
        // Stopped cleanly before the backup: the copy says the cache was saved.
        #expect(first.terminate() == 0)
        let backup = directory + "/backup.db"
        let made = try KeyAuthServerProcess.runCommand(
            ["backup", backup, "--db", environment.databasePath, "--config", "/dev/null"])
        #expect(made.status == 0, "\(made.error)")

        let second = try KeyAuthServerProcess.started(
            name: "second", database: environment.databasePath, in: directory,
            extraArguments: ["--replay-cache", replayCache, "--issuer", TestEnvironment.issuer])
        let live = try Self.api(second, environment)
        Self.signAfterTheRestartRule(environment.clock)
        let assertion = try live.assertion(key)
        #expect(try live.login(assertion: assertion).status == 200)
        live.storage.close()
        #expect(second.terminate() == 0)

        // The backup restored in place of the database.
        try FileManager.default.removeItem(atPath: environment.databasePath)
        try FileManager.default.copyItem(atPath: backup, toPath: environment.databasePath)
        chmod(environment.databasePath, 0o600)
        let restored = try KeyAuthServerProcess.started(
            name: "restored", database: environment.databasePath, in: directory,
            extraArguments: ["--replay-cache", replayCache, "--issuer", TestEnvironment.issuer])
        defer { restored.terminate() }
        let after = try Self.api(restored, environment)
        defer { after.storage.close() }
        let replayed = try after.login(assertion: assertion)
        #expect(replayed.status == 400 && replayed.json?["access_token"] == nil, "\(replayed.text)")
        #expect(
            replayed.errorDescription?.contains("issued before the server restarted") == true,
            "\(replayed.errorDescription ?? "")")
    }

    @Test("backup refuses an existing file, a PostgreSQL database and a missing database, and creates nothing")
    func refusals() throws {
        let environment = TestEnvironment()
        try StorageFactory.open(environment.databasePath).close()
        let existing = environment.directory.path + "/existing.db"
        FileManager.default.createFile(atPath: existing, contents: Data("keep".utf8))
        let overwrite = try KeyAuthServerProcess.runCommand(
            ["backup", existing, "--db", environment.databasePath, "--config", "/dev/null"])
        #expect(overwrite.status == 1)
        #expect(overwrite.error.contains("it exists; choose a new name"))
        #expect(try String(contentsOfFile: existing, encoding: .utf8) == "keep")
        // The database itself is an existing file too.
        let itself = try KeyAuthServerProcess.runCommand(
            ["backup", environment.databasePath, "--db", environment.databasePath, "--config", "/dev/null"])
        #expect(itself.status == 1)

        let target = environment.directory.path + "/never.db"
        let postgres = try KeyAuthServerProcess.runCommand(
            ["backup", target, "--db", "postgres://keyauth@127.0.0.1/keyauth", "--config", "/dev/null"])
        #expect(postgres.status == 64)
        #expect(postgres.error.contains("pg_dump"))
        let missing = try KeyAuthServerProcess.runCommand(
            ["backup", target, "--db", environment.directory.path + "/none.db", "--config", "/dev/null"])
        #expect(missing.status == 69)
        #expect(!FileManager.default.fileExists(atPath: target))
    }

    @Test("a finished copy is linked into place, never over a file made there meanwhile")
    func publishNeverReplaces() throws {
        let environment = TestEnvironment()
        let partial = environment.directory.path + "/copy.db.partial-1"
        let destination = environment.directory.path + "/copy.db"
        FileManager.default.createFile(atPath: partial, contents: Data("copy".utf8))
        FileManager.default.createFile(atPath: destination, contents: Data("keep".utf8))
        #expect(throws: StorageError.self) { try ServerCommand.publish(partial, as: destination) }
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "keep")
        unlink(destination)
        try ServerCommand.publish(partial, as: destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "copy")
        #expect(!FileManager.default.fileExists(atPath: partial))
    }
}
