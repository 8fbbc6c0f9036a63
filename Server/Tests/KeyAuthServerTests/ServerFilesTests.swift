import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The SQLite database holds the server's private signing key: whoever reads it forges access
/// tokens for every user. These tests run the built binary the way an operator would, under the
/// common umask 022, in a directory other users may enter.
@Suite("The server's files are private to its user", .timeLimit(.minutes(10)))
struct ServerFilesTests {
    static let canSwitchUser =
        geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser")

    @Test(
        "under umask 022, serve creates the database, its -wal, -shm and -device-changes with mode 600")
    func createdPrivate() throws {
        let directory = Self.enterableDirectory()
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        let server = try Self.serve(database, in: directory)
        defer { server.terminate() }
        try server.waitUntilListening()
        for file in [database, database + "-wal", database + "-shm", database + "-device-changes"] {
            #expect(fileMode(file) == 0o600, "\(file)")
        }
    }

    @Test(
        "another local user cannot read the database or its WAL after serve started",
        .enabled(if: canSwitchUser))
    func otherUserCannotRead() throws {
        let directory = Self.enterableDirectory()
        defer { directory.remove() }
        // The control: `nobody` reads an ordinary file in the same directory, so a failure below
        // comes from the files' own modes, not from the directory.
        let control = directory.path + "/control"
        #expect(FileManager.default.createFile(atPath: control, contents: Data("readable".utf8)))
        chmod(control, 0o644)
        let controlRead = try Self.runAsNobody(["cat", control])
        #expect(controlRead.status == 0)
        #expect(controlRead.output == "readable")

        let database = directory.path + "/ka.db"
        let server = try Self.serve(database, in: directory)
        defer { server.terminate() }
        try server.waitUntilListening()
        for file in [database, database + "-wal"] {
            let result = try Self.runAsNobody(["cat", file])
            #expect(result.status != 0, "nobody read \(file)")
            #expect(result.output.isEmpty, "nobody read \(file)")
        }
    }

    @Test(
        "a database file with group or other permission bits is refused with exit status 65 and the chmod fix")
    func exposedDatabaseRefused() throws {
        let directory = Self.enterableDirectory()
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        try StorageFactory.open(database).close()
        for (mode, exposure) in [(0o644, "readable by others (mode 644)"), (0o640, "readable by its group (mode 640)")]
        {
            chmod(database, mode_t(mode))
            let expected =
                "keyauth-server: \(database) is \(exposure): it holds the server's signing key; "
                + "run: chmod 600 \(database)\n"
            let server = try Self.serve(database, in: directory)
            #expect(server.waitUntilExit() == 65)
            #expect(server.log == expected)
            for arguments in [["devices"], ["enroll", "alice"], ["revoke", "some-kid"]] {
                let result = try KeyAuthServerProcess.runCommand(arguments + ["--db", database])
                #expect(result.status == 65, "\(arguments)")
                #expect(result.error == expected, "\(arguments)")
            }
            #expect(fileMode(database) == mode_t(mode), "the server must not silently change the mode")
        }
        chmod(database, 0o600)
        #expect(try KeyAuthServerProcess.runCommand(["devices", "--db", database]).status == 0)
    }

    @Test(
        "a database file of another user is refused with exit status 65, naming the owner", .enabled(if: canSwitchUser))
    func foreignDatabaseRefused() throws {
        let directory = Self.enterableDirectory()
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        try StorageFactory.open(database).close()
        #expect(chown(database, 65534, 65534) == 0)
        let server = try Self.serve(database, in: directory)
        #expect(server.waitUntilExit() == 65)
        #expect(
            server.log.hasPrefix("keyauth-server: \(database) belongs to user nobody (uid 65534), not to user root"))
        #expect(server.log.contains("chown root \(database)"))
        let devices = try KeyAuthServerProcess.runCommand(["devices", "--db", database])
        #expect(devices.status == 65)
        #expect(devices.error == server.log)
    }

    @Test(
        "enroll, devices and revoke on a missing database create nothing and exit 69 naming the path")
    func adminCommandsCreateNothing() throws {
        let directory = Self.enterableDirectory()
        defer { directory.remove() }
        let missing = directory.path + "/missing.db"
        func message(_ path: String) -> String {
            "keyauth-server: no database at \(path) (keyauth-server serve creates it; pass --db PATH, set "
                + "KEYAUTH_SERVER_DB, or --config FILE with db = PATH)\n"
        }
        for arguments in [["enroll", "alice"], ["devices"], ["revoke", "some-kid"]] {
            let flagged = try KeyAuthServerProcess.runCommand(arguments + ["--db", missing])
            #expect(flagged.status == 69, "\(arguments)")
            #expect(flagged.error == message(missing), "\(arguments)")
            let fromEnvironment = try KeyAuthServerProcess.runCommand(
                arguments, environment: ["KEYAUTH_SERVER_DB": missing])
            #expect(fromEnvironment.status == 69, "\(arguments)")
            #expect(fromEnvironment.error == message(missing), "\(arguments)")
            let byDefault = try KeyAuthServerProcess.runCommand(arguments, currentDirectory: directory.path)
            #expect(byDefault.status == 69, "\(arguments)")
            #expect(byDefault.error == message("keyauth-server.db"), "\(arguments)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [])
    }

    @Test("existing -wal, -shm and -device-changes files of the server's user are tightened to 600, not refused")
    func companionsTightened() throws {
        let directory = Self.enterableDirectory()
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        try StorageFactory.open(database).close()
        for suffix in ["-wal", "-shm", "-device-changes"] {
            #expect(
                FileManager.default.createFile(
                    atPath: database + suffix, contents: nil, attributes: [.posixPermissions: 0o644]))
            #expect(fileMode(database + suffix) == 0o644)
        }
        let storage = try StorageFactory.open(database)
        defer { storage.close() }
        for file in [database, database + "-wal", database + "-shm", database + "-device-changes"] {
            #expect(fileMode(file) == 0o600, "\(file)")
        }
        try storage.healthCheck()
    }

    @Test("the chmod hint quotes a path with spaces so that it can be pasted")
    func hintQuotesPaths() {
        #expect(SQLiteFilePermissions.shellQuoted("/var/lib/keyauth/ka.db") == "/var/lib/keyauth/ka.db")
        #expect(SQLiteFilePermissions.shellQuoted("/srv/my data/ka.db") == "'/srv/my data/ka.db'")
        #expect(SQLiteFilePermissions.shellQuoted("it's.db") == "'it'\\''s.db'")
    }

    // MARK: Helpers

    /// A temporary directory with mode 755, so that only the files' own modes keep others out.
    static func enterableDirectory() -> TemporaryDirectory {
        let directory = TemporaryDirectory("keyauth-files")
        chmod(directory.path, 0o755)
        return directory
    }

    /// `keyauth-server serve` on `database` under umask 022, its log in `directory`.
    static func serve(_ database: String, in directory: TemporaryDirectory, extra: [String] = []) throws
        -> KeyAuthServerProcess
    {
        try KeyAuthServerProcess(
            name: "files",
            arguments: ["serve", "--listen", "127.0.0.1:0", "--db", database, "--quiet"] + extra,
            logPath: directory.path + "/server-\(UUID().uuidString).log", umask: "022")
    }

    /// Runs a command as the unprivileged user `nobody`.
    static func runAsNobody(_ command: [String]) throws -> (status: Int32, output: String) {
        let run = try runProcess(
            "/usr/sbin/runuser", ["-u", "nobody", "--"] + command, environment: ProcessInfo.processInfo.environment)
        return (run.status, run.standardOutput)
    }
}
