import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// An administrator's first hour often starts with a failed start. Each way `serve` can fail to
/// start, run for real against the built binary: one line that says what is wrong and what to
/// do, the documented exit status, and nothing left half-made (no new database file, an existing
/// one unchanged).
@Suite("serve fails well at start", .timeLimit(.minutes(10)))
struct ServeStartTests {
    /// Whether tests may run the server as `nobody` (root, with runuser).
    static let canSwitchUser = ServerFilesTests.canSwitchUser

    @Test(
        "--db naming a file that is not a keyauth database is refused with exit 65 as by the admin commands, unchanged",
        arguments: [
            ("server.conf", "it is not a SQLite database file"), ("notes.db", "it has no schema_migrations table"),
        ])
    func notKeyAuthDatabase(name: String, reason: String) throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let path = directory.path + "/" + name
        if name.hasSuffix(".db") {
            let connection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 1000)
            try connection.execute("CREATE TABLE notes (body TEXT)")
        } else {
            // The settings file, mode 644 as packages install it: refused as not keyauth's, not
            // as a database others can read.
            #expect(FileManager.default.createFile(atPath: path, contents: Data("listen = 127.0.0.1:8080\n".utf8)))
        }
        chmod(path, name.hasSuffix(".db") ? 0o600 : 0o644)
        let run = try Self.refused(path)
        #expect(run.status == 65, "\(run.error)")
        #expect(run.error == "keyauth-server: \(path) is not a keyauth database (\(reason))\n")
    }

    @Test(
        "a port in use stops serve with exit 69 naming it, before the database: none is created, an older one not migrated"
    )
    func portInUse() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let first = try KeyAuthServerProcess.started(
            name: "first", database: directory.path + "/first.db", in: directory.path)
        defer { first.terminate() }
        let port = first.port
        let inUse =
            "another process listens on port \(port) (`ss -ltnp 'sport = :\(port)'` shows which); stop it, or pass"
        let state = directory.path + "/state"
        mkdir(state, 0o700)
        let older = state + "/older.db"
        do {
            let connection = try SQLiteConnection(path: older, busyTimeoutMilliseconds: 1000)
            try SQLSchema.build(on: connection, upTo: SQLSchema.latestVersion - 1)
        }
        chmod(older, 0o600)
        for database in [state + "/new.db", older] {
            let run = try Self.refused(database, listen: "127.0.0.1:\(port)")
            #expect(run.status == 69, "\(run.error)")
            #expect(
                run.error
                    == "keyauth-server: cannot listen on 127.0.0.1:\(port): \(inUse) --listen HOST:PORT with a free port\n"
            )
        }
        let metrics = try Self.refused(state + "/new.db", ["--metrics-listen", "127.0.0.1:\(port)"])
        #expect(metrics.status == 69, "\(metrics.error)")
        #expect(
            metrics.error
                == "keyauth-server: cannot listen on 127.0.0.1:\(port) for metrics: \(inUse) --metrics-listen HOST:PORT "
                + "with a free port, or --metrics-listen off\n")
    }

    @Test("an address this machine does not have is named as such, exit 69", arguments: ["192.0.2.1", "[2001:db8::1]"])
    func addressNotHere(host: String) throws {
        let run = try Self.serve(["--db", "/nonexistent/keyauth.db"], listen: host + ":8088")
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let all = host.hasPrefix("[") ? "[::]:8088" : "0.0.0.0:8088"
        #expect(run.status == 69, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: cannot listen on \(host):8088: \(bare) is not an address of this machine "
                + "(`ip -brief address` lists them); pass --listen with one of them, or \(all) for all\n")
    }

    /// The first port an unprivileged process may bind (1024 unless the machine lowered it).
    static let unprivilegedPortStart =
        (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding: .utf8))
        .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 1024

    @Test(
        "port 80 as a user without CAP_NET_BIND_SERVICE says so, exit 69",
        .enabled(if: canSwitchUser && unprivilegedPortStart > 80))
    func privilegedPort() throws {
        let run = try Self.serve(["--db", "/nonexistent/keyauth.db"], listen: "127.0.0.1:80", wrappedIn: Self.asNobody)
        #expect(run.status == 69, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: cannot listen on 127.0.0.1:80: a port below 1024 needs root or the capability "
                + "CAP_NET_BIND_SERVICE; pass --listen with a port from 1024 (behind a reverse proxy, docs/SERVER.md), "
                + "or grant the capability\n")
    }

    @Test(
        "a start that fails after opening the database removes the file it created, and leaves one it found as a clean stop does"
    )
    func lateFailure() throws {
        let environment = TestEnvironment()
        // A key size the server cannot make: the start fails at its last step, composing the
        // application, after the database was created and the replay cache started.
        let failing = try environment.configuration { $0.signingKeyBits = 1000 }
        func expectRefused() {
            do {
                _ = try ServerRunner(configuration: failing, log: SilentLog())
                Issue.record("started")
            } catch let error as KeyAuthError {
                #expect(error.code == .invalidArgument, "\(error)")
            } catch {
                Issue.record("\(error)")
            }
        }
        expectRefused()
        #expect(try FileManager.default.contentsOfDirectory(atPath: environment.directory.path) == [])

        // A database that exists (made without a key) is kept, and its replay cache is not left
        // marked as running, which the next start would take for a crash.
        try StorageFactory.open(environment.databasePath).close()
        expectRefused()
        let storage = try StorageFactory.open(environment.databasePath)
        defer { storage.close() }
        #expect(try ReplayGuard.start(mode: .memory, storage: storage, now: ServerClock.now()).horizon == nil)
    }

    @Test("the serve lock creates a missing file, and removes it only when it created it and no server shares it")
    func lockCreatesAndRemoves() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let path = directory.path + "/ka.db"
        do {
            let created = try SQLiteServeLock(path: path, exclusive: false)
            #expect(created.created)
            #expect(fileMode(path).map { $0 & 0o777 } == 0o600)
            let another = try SQLiteServeLock(path: path, exclusive: false)
            #expect(!another.created)
            // Another server shares the file: it stays.
            created.removeCreatedDatabase()
            #expect(FileManager.default.fileExists(atPath: path))
            withExtendedLifetime((created, another)) {}
        }
        let alone = try SQLiteServeLock(path: directory.path + "/alone.db", exclusive: true)
        alone.removeCreatedDatabase()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["ka.db"])
        // One it found is never removed.
        let found = try SQLiteServeLock(path: path, exclusive: true)
        found.removeCreatedDatabase()
        #expect(FileManager.default.fileExists(atPath: path))
    }

    @Test("a missing database directory says so with exit 69, and nothing is created")
    func missingDirectory() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let state = directory.path + "/state"
        let run = try Self.serve(["--db", state + "/ka.db"])
        #expect(run.status == 69, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: cannot create the database \(state)/ka.db: the directory \(state) does not exist; "
                + "create it (mkdir -m 700 \(state), owned by \(SQLiteFilePermissions.describe(geteuid()))), or pass "
                + "--db with a path in an existing directory\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [])
    }

    @Test(
        "as a user who may not write the database's directory, or the database itself (mode 400): exit 69, the fix, nothing made",
        .enabled(if: canSwitchUser))
    func notWritable() throws {
        let directory = ServerFilesTests.enterableDirectory()
        defer { directory.remove() }
        // The directory is root's, the server nobody.
        let rootOwned = try Self.refused(directory.path + "/ka.db", wrappedIn: Self.asNobody)
        #expect(rootOwned.status == 69)
        #expect(
            rootOwned.error
                == "keyauth-server: cannot write the database \(directory.path)/ka.db: \(directory.path) (mode 755) is not "
                + "writable by user nobody (uid 65534), and SQLite keeps the database's -wal and -shm files there; run: "
                + "chown nobody \(directory.path), or keep the database in a directory of nobody's\n")

        let state = directory.path + "/state"
        mkdir(state, 0o700)
        let database = state + "/ka.db"
        try StorageFactory.open(database).close()
        #expect(chown(state, 65534, 65534) == 0)
        #expect(chown(database, 65534, 65534) == 0)
        #expect(chown(database + "-device-changes", 65534, 65534) == 0)
        chmod(database, 0o400)
        let readOnly = try Self.refused(database, wrappedIn: Self.asNobody)
        #expect(readOnly.status == 69)
        #expect(
            readOnly.error
                == "keyauth-server: cannot write the database \(database): \(database) (mode 400) is not writable by user "
                + "nobody (uid 65534), and the server writes to it; run: chmod 600 \(database)\n")
    }

    /// Whether this process may mount (a read-only bind mount in a mount namespace of its own).
    static let canMount: Bool = {
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else { return false }
        let probe = try? runProcess(
            "/usr/bin/unshare", ["--mount", "sh", "-c", "mount --bind -o ro /tmp /tmp"],
            environment: ProcessInfo.processInfo.environment)
        return probe?.status == 0
    }()

    @Test(
        "a database on a read-only file system: exit 69 saying so, and the database is left as it was",
        .enabled(if: canMount))
    func readOnlyFileSystem() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        try StorageFactory.open(database).close()
        for path in [database, directory.path + "/new.db"] {
            // The directory read-only in a mount namespace of the server's own, gone with it.
            let run = try Self.refused(
                path,
                wrappedIn: [
                    "/usr/bin/unshare", "--mount", "sh", "-c", "mount --bind -o ro \"$0\" \"$0\" && exec \"$@\"",
                    directory.path,
                ])
            #expect(run.status == 69, "\(run.error)")
            #expect(
                run.error
                    == "keyauth-server: cannot write the database \(path): \(directory.path) is on a read-only file system; "
                    + "put the database on a writable one (--db PATH), or mount it read-write\n")
        }
    }

    @Test(
        "a database directory its group or others may write is refused with exit 65, by serve and the admin commands",
        arguments: [(0o777, "others"), (0o770, "its group")])
    func exposedDirectory(mode: Int, who: String) throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let state = directory.path + "/state"
        mkdir(state, 0o700)
        let database = state + "/ka.db"
        try StorageFactory.open(database).close()
        chmod(state, mode_t(mode))
        for path in [database, state + "/new.db"] {
            let run = try Self.refused(path)
            #expect(run.status == 65, "\(run.error)")
            #expect(
                run.error
                    == "keyauth-server: the directory \(state) of \(path) is writable by \(who) (mode \(String(mode, radix: 8))), "
                    + "who could replace the database, which holds the server's signing key; run: chmod go-w \(state)\n"
            )
        }
        let devices = try KeyAuthServerProcess.runCommand(["devices", "--db", database])
        #expect(devices.status == 65)
        #expect(devices.error.hasPrefix("keyauth-server: the directory \(state) of \(database) is writable by \(who)"))
    }

    @Test(
        "a database directory of another user is refused with exit 65; a sticky one, as /tmp, serves",
        .enabled(if: canSwitchUser))
    func foreignAndStickyDirectories() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let state = directory.path + "/state"
        mkdir(state, 0o755)
        #expect(chown(state, 65534, 65534) == 0)
        let run = try Self.refused(state + "/ka.db")
        #expect(run.status == 65, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: the directory \(state) of \(state)/ka.db belongs to user nobody (uid 65534), who could "
                + "replace the database, which holds the server's signing key; keep it in a directory only root can "
                + "write, such as /var/lib/keyauth\n")
        #expect(chown(state, 0, 0) == 0)
        chmod(state, 0o1777)
        let server = try KeyAuthServerProcess.started(name: "sticky", database: state + "/ka.db", in: directory.path)
        server.terminate()
    }

    @Test(
        "a signing key file the server's user cannot open is refused with exit 65 saying what it must be",
        .enabled(if: canSwitchUser))
    func unreadableSigningKeyFile() throws {
        let directory = ServerFilesTests.enterableDirectory()
        defer { directory.remove() }
        let keys = directory.path + "/keys"
        mkdir(keys, 0o700)
        let keyFile = keys + "/signing-key.pem"
        try SecureFile.write(try ServerTestKeys.key("signing-key-file").pkcs8PEM(), to: keyFile)
        let run = try Self.refused(
            directory.path + "/ka.db", ["--signing-key-file", keyFile], wrappedIn: Self.asNobody)
        #expect(run.status == 65, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: --signing-key-file: cannot open \(keyFile): Permission denied; it must be a file of "
                + "the user who runs keyauth-server, mode 600, in a directory of theirs, mode 700\n")
    }

    @Test("a second server on a SQLite file whose first keeps its replay cache in memory: exit 69, what to do")
    func secondServer() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        let first = try KeyAuthServerProcess.started(name: "first", database: database, in: directory.path)
        defer { first.terminate() }
        for arguments in [[], ["--replay-cache", "database"]] {
            let run = try Self.serve(["--db", database, "--metrics-listen", "off"] + arguments)
            #expect(run.status == 69, "\(run.error)")
            #expect(
                run.error
                    == "keyauth-server: another keyauth-server serves \(database), and a server with --replay-cache memory "
                    + "must be alone on its database; stop the other one, or run every instance with --replay-cache "
                    + "database\n")
        }
    }

    @Test(
        "a PostgreSQL URL with a wrong password or nobody listening: exit 69, the URL with ***, never the password",
        .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
    func postgresRefused() throws {
        let url = try #require(PostgresTestServer.url)
        let wrong = try #require(PostgresTestServer.replacingPassword(in: url, with: "not-the-password-42"))
        let refused = try Self.serve(["--db", wrong])
        #expect(refused.status == 69, "\(refused.error)")
        #expect(refused.error.hasPrefix("keyauth-server: cannot connect to PostgreSQL at postgres://"))
        #expect(refused.error.contains(":***@") && refused.error.contains("password authentication failed"))
        let unreachable = try Self.serve(["--db", "postgres://keyauth:not-the-password-42@127.0.0.1:1/keyauth"])
        #expect(unreachable.status == 69, "\(unreachable.error)")
        #expect(
            unreachable.error.hasPrefix(
                "keyauth-server: cannot connect to PostgreSQL at postgres://keyauth:***@127.0.0.1:1/keyauth"))
        for run in [refused, unreachable] {
            #expect(!run.error.contains("not-the-password-42"))
            #expect(run.error.split(separator: "\n").count == 1)
        }
    }

    @Test(
        "settings serve cannot use together stop serve and check-config when parsed: exit 64, or 78 from the settings file",
        arguments: [
            (["--db", "postgres://keyauth@db.example/keyauth", "--replay-cache", "memory"], "replay-cache = memory"),
            (["--ssh-principals-file", "/etc/keyauth/principals"], "ssh-principals-file = /etc/keyauth/principals"),
        ])
    func conflictingSettings(flags: [String], line: String) throws {
        let problem =
            flags.contains("--replay-cache")
            ? ServerConfiguration.memoryReplayCacheOnPostgres : ServerConfiguration.principalsWithoutCA
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let file = directory.path + "/server.conf"
        try (line + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        // The setting that decides the status: a flag (64), or a line of the settings file (78).
        let fromFile = ["--config", file] + flags.prefix { !$0.hasPrefix("--replay-cache") && !$0.hasPrefix("--ssh") }
        for (arguments, status) in [(flags, Int32(64)), (fromFile, 78)] {
            for verb in ["serve", "check-config"] {
                do {
                    _ = try ServerCommand.parse(
                        arguments: [verb] + arguments, environment: [:], defaultSettingsFile: nil)
                    Issue.record("\(verb) \(arguments) parsed")
                } catch {
                    #expect(error == ServerConfigurationError(problem, status: status), "\(verb) \(arguments)")
                }
            }
        }
    }

    // MARK: Helpers

    /// `runuser -u nobody --`: the command as the unprivileged user.
    static let asNobody = ["/usr/sbin/runuser", "-u", "nobody", "--"]

    /// Runs `keyauth-server serve` on `listen` with no request log and no settings file, to its
    /// end, under `wrapper` (``asNobody``, a mount namespace) when given.
    static func serve(_ arguments: [String], listen: String = "127.0.0.1:0", wrappedIn wrapper: [String] = []) throws
        -> (status: Int32, error: String)
    {
        try run(["serve", "--listen", listen, "--quiet"] + arguments, wrappedIn: wrapper)
    }

    /// Runs the built `keyauth-server` with `command` (`serve ...`, `devices ...`) and no
    /// settings file, to its end, under `wrapper` (``asNobody``, a mount namespace) when given.
    static func run(_ command: [String], wrappedIn wrapper: [String] = []) throws -> (status: Int32, error: String) {
        guard let program = wrapper.first else {
            let run = try KeyAuthServerProcess.runCommand(command, timeout: 30)
            return (run.status, run.error)
        }
        // Another user may not reach the built binary: a clone often lies under a directory
        // only root may enter (`mktemp -d`, /root), so `nobody` runs a copy in one it may.
        let copy = TemporaryDirectory("keyauth-start-binary")
        defer { copy.remove() }
        chmod(copy.path, 0o755)
        let binary = copy.path + "/keyauth-server"
        try FileManager.default.copyItem(atPath: KeyAuthServerProcess.binary.path, toPath: binary)
        chmod(binary, 0o755)
        let run = try runProcess(
            program, Array(wrapper.dropFirst()) + [binary] + command, environment: KeyAuthServerProcess.environment,
            timeout: 30)
        return (run.status, run.standardError)
    }

    /// Runs `serve --db database` as ``serve(_:listen:wrappedIn:)`` does, expecting a refusal
    /// that changes nothing (``refused(_:database:wrappedIn:)``).
    static func refused(
        _ database: String, _ arguments: [String] = [], listen: String = "127.0.0.1:0", wrappedIn wrapper: [String] = []
    ) throws -> (status: Int32, error: String) {
        try refused(["serve", "--listen", listen, "--quiet"] + arguments, database: database, wrappedIn: wrapper)
    }

    /// Runs `command --db database` as ``run(_:wrappedIn:)`` does, expecting a refusal: the
    /// database's directory must be byte for byte as it was (no file created or removed, none
    /// changed in contents or mode: not created, not migrated, no companion files).
    static func refused(_ command: [String], database: String, wrappedIn wrapper: [String] = []) throws
        -> (status: Int32, error: String)
    {
        let directory = SecureFile.parentDirectory(of: database)
        let before = try DirectoryState(directory)
        let run = try run(command + ["--db", database], wrappedIn: wrapper)
        #expect(try DirectoryState(directory) == before, "\(command): \(run.error)")
        return run
    }
}

/// The names, modes and contents of a directory's files, to compare before and after a command.
struct DirectoryState: Equatable {
    private let files: [String: FileState]

    private struct FileState: Equatable {
        let mode: mode_t?
        let contents: Data?
    }

    init(_ directory: String) throws {
        var files: [String: FileState] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let path = directory + "/" + name
            files[name] = FileState(mode: fileMode(path), contents: FileManager.default.contents(atPath: path))
        }
        self.files = files
    }
}
