import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// The admin commands open the database `serve` runs on, often right after a `serve` refused it,
    /// so a fault must read the same from either: the same line and exit status, and the directory
    /// left byte for byte as it was (no database created, no keyauth table added to another
    /// program's file, no `-wal` or `-shm` made). Each command that opens the database, run for
    /// real against the built binary, for each fault, beside `serve`'s answer to the same fault.
    ///
    /// Nested in ``StorageContractTests`` (serialized): its cases run 16 commands each, waiting
    /// synchronously, and side by side they held both threads of Swift's cooperative pool on a 2-core
    /// machine for four minutes, stalling every other test of a full run.
    @Suite("the admin commands refuse a database as serve does", .timeLimit(.minutes(10)))
    struct AdminCommandChecksTests {
        /// A fault of the database or its directory.
        enum Fault: String, CaseIterable, CustomTestStringConvertible {
            case missing, foreignSQLite, textFile, exposedFile, groupWritableDirectory, readOnlyFileSystem
            /// The database's, run as `nobody` in a directory of root's, mode 755.
            case unwritableDirectory
            var testDescription: String { rawValue }
        }

        /// Every command that opens the database, with arguments that need nothing stored; what
        /// they write (a backup, a revocation list) goes to `output`, which holds the SSH CA key.
        private static func commands(output: String) -> [[String]] {
            [
                ["enroll", "alice"], ["devices"], ["approve", "AAAAAAAA"], ["revoke", "AAAAAAAA"], ["users"],
                ["delete-user", "alice"], ["codes", "list"], ["codes", "revoke", "alice"], ["keys"],
                ["keys", "rotate"],
                ["clients", "add", "app"], ["clients", "list"], ["clients", "remove", "AAAAAAAA"], ["audit"],
                ["backup", output + "/backup.db"],
                ["ssh-ca", "krl", output + "/krl", "--ssh-ca-key-file", output + "/ca/ca.pem"],
            ]
        }

        /// Makes `fault` at `database` (in a directory of its own, 0700) and returns the command
        /// prefix that runs a program in it: a mount namespace for a read-only file system, `nobody`
        /// for a directory they may not write.
        private static func arrange(_ fault: Fault, at database: String) throws -> [String] {
            let directory = SecureFile.parentDirectory(of: database)
            switch fault {
            case .missing:
                return []
            case .foreignSQLite:
                let connection = try SQLiteConnection(path: database, busyTimeoutMilliseconds: 1000)
                try connection.execute("CREATE TABLE notes (body TEXT)")
                chmod(database, 0o600)
            case .textFile:
                // The settings file, mode 644 as packages install it.
                try Data("listen = 127.0.0.1:8080\n".utf8).write(to: URL(fileURLWithPath: database))
                chmod(database, 0o644)
            case .exposedFile, .groupWritableDirectory, .readOnlyFileSystem, .unwritableDirectory:
                try StorageFactory.open(database).close()
                if fault == .exposedFile { chmod(database, 0o644) }
                if fault == .groupWritableDirectory { chmod(directory, 0o770) }
            }
            if fault == .unwritableDirectory {
                chmod(directory, 0o755)
                for file in [database, database + "-device-changes"] { chown(file, 65534, 65534) }
                return ServeStartTests.asNobody
            }
            guard fault == .readOnlyFileSystem else { return [] }
            return [
                "/usr/bin/unshare", "--mount", "sh", "-c", "mount --bind -o ro \"$0\" \"$0\" && exec \"$@\"", directory,
            ]
        }

        @Test(
            "each admin command: serve's line and exit status for the same fault, the directory unchanged",
            arguments: Fault.allCases)
        func sameAsServe(_ fault: Fault) throws {
            guard fault != .readOnlyFileSystem || ServeStartTests.canMount else { return }
            guard fault != .unwritableDirectory || ServeStartTests.canSwitchUser else { return }
            // Where nobody may enter, for the fault that runs the commands as nobody.
            let output = ServerFilesTests.enterableDirectory()
            defer { output.remove() }
            // The CA key in a directory of the user who runs the commands, as ssh-ca requires.
            mkdir(output.path + "/ca", 0o700)
            let ca = try KeyAuthServerProcess.runCommand([
                "ssh-ca", "init", "--ssh-ca-key-file", output.path + "/ca/ca.pem",
            ])
            #expect(ca.status == 0, "\(ca.error)")
            if fault == .unwritableDirectory {
                for path in [output.path + "/ca", output.path + "/ca/ca.pem"] { chown(path, 65534, 65534) }
            }
            let directory = ServerFilesTests.enterableDirectory()
            defer { directory.remove() }
            let state = directory.path + "/state"
            mkdir(state, 0o700)
            let database = state + "/ka.db"
            let wrapper = try Self.arrange(fault, at: database)
            let expected: (status: Int32, error: String)
            if fault == .missing {
                // serve creates it; only serve does.
                expected = (
                    69,
                    "keyauth-server: no database at \(database) (keyauth-server serve creates it; pass --db PATH, set "
                        + "KEYAUTH_SERVER_DB, or --config FILE with db = PATH)\n"
                )
            } else {
                expected = try ServeStartTests.refused(database, wrappedIn: wrapper)
                #expect([65, 69].contains(expected.status), "\(expected.error)")
            }
            for command in Self.commands(output: output.path) {
                let run = try ServeStartTests.refused(command, database: database, wrappedIn: wrapper)
                #expect(run.status == expected.status, "\(command): \(run.error)")
                #expect(run.error == expected.error, "\(command)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["ca"])
        }
    }
}
