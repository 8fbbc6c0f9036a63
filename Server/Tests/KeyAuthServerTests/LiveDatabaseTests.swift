import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// Other processes on a live server's SQLite database: admin commands and backups run beside
/// `serve`, and must neither take the server's write-ahead log away nor lose its writes.
@Suite("keyauth-server beside admin commands on a live database", .timeLimit(.minutes(10)))
struct LiveDatabaseTests {
    @Test("an admin command on a live database leaves the server's WAL, and writes after it survive kill -9")
    func adminCommandKeepsWAL() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        // A login right after kill -9: with the replay cache in memory it would wait out the
        // restart rule (CrashDurabilityTests covers that); here the WAL is the point.
        func serve(_ name: String) throws -> KeyAuthServerProcess {
            try KeyAuthServerProcess.started(
                name: name, database: database, in: environment.directory.path,
                extraArguments: ["--replay-cache", "database"])
        }
        let server = try serve("live")
        defer { server.terminate() }
        let storage = try StorageFactory.open(database, creatingIfMissing: false)
        defer { storage.close() }
        let api = TestAPI(server: server, clock: environment.clock, storage: storage)
        #expect(try api.register(user: "alice", key: ServerTestKeys.key("alice-1")).status == 201)
        #expect(FileManager.default.fileExists(atPath: database + "-wal"))

        // Another process opens and closes the database while the server runs.
        let listing = try KeyAuthServerProcess.runCommand(["devices", "--db", database, "--config", "/dev/null"])
        #expect(listing.status == 0)
        #expect(FileManager.default.fileExists(atPath: database + "-wal"), "the admin command deleted the WAL")

        let later = try ServerTestKeys.key("bob-1")
        #expect(try api.register(user: "bob", key: later).status == 201)
        #expect(server.kill())
        storage.close()

        let restarted = try serve("restarted")
        defer { restarted.terminate() }
        let reopened = try StorageFactory.open(database, creatingIfMissing: false)
        defer { reopened.close() }
        let after = TestAPI(server: restarted, clock: environment.clock, storage: reopened)
        #expect(try after.login(later).status == 200, "a registration acknowledged after the admin command was lost")
    }
}
