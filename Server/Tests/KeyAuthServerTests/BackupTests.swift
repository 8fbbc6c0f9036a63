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
        let login = try after.login(kept)
        #expect(login.status == 200)
        #expect(login.json?["access_token"]?.stringValue != nil)
        #expect(try after.login(lost).errorCode == "invalid_grant")
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
}
