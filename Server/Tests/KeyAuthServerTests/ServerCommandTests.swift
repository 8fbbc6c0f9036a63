import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("keyauth-server command line", .timeLimit(.minutes(10)))
struct ServerCommandTests {
    private func serve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ServerConfiguration {
        guard case .serve(let configuration) = try ServerCommand.parse(arguments: arguments, environment: environment)
        else { throw TestFailure("not serve") }
        return configuration
    }

    @Test("serve defaults: 127.0.0.1:8088, keyauth-server.db, enrollment codes, no proxy, 10 failures a minute")
    func defaults() throws {
        for arguments in [[], ["serve"]] {
            let configuration = try serve(arguments)
            #expect(configuration.listen.description == "127.0.0.1:8088")
            #expect(configuration.database == "keyauth-server.db")
            #expect(configuration.enrollment == .code)
            #expect(configuration.trustProxy == false)
            #expect(configuration.failureLimit == 10)
            #expect(configuration.accessTokenLifetime == 900)
            #expect(configuration.resolvedIssuer(boundPort: 8088) == "http://127.0.0.1:8088")
        }
    }

    @Test("KEYAUTH_SERVER_* variables configure the server and flags override them")
    func environmentAndFlags() throws {
        let environment = [
            "KEYAUTH_SERVER_LISTEN": "0.0.0.0:9000", "KEYAUTH_SERVER_ISSUER": "https://login.example",
            "KEYAUTH_SERVER_DB": "/var/lib/keyauth/db", "KEYAUTH_SERVER_ENROLLMENT": "code",
            "KEYAUTH_SERVER_TRUST_PROXY": "1", "KEYAUTH_SERVER_RATE_LIMIT": "5", "KEYAUTH_SERVER_THREADS": "8",
            "KEYAUTH_SERVER_DB_CONNECTIONS": "12",
        ]
        let fromEnvironment = try serve([], environment)
        #expect(fromEnvironment.listen.description == "0.0.0.0:9000")
        #expect(fromEnvironment.issuer == "https://login.example")
        #expect(fromEnvironment.database == "/var/lib/keyauth/db")
        #expect(fromEnvironment.enrollment == .code)
        #expect(fromEnvironment.trustProxy)
        #expect(fromEnvironment.failureLimit == 5)
        #expect(fromEnvironment.threads == 8)
        #expect(fromEnvironment.databaseConnections == 12)
        #expect(try serve([], [:]).databaseConnections == PostgresStorage.defaultPoolSize)

        let overridden = try serve(
            [
                "serve", "--listen", "[::1]:8443", "--issuer=https://other.example", "--db", "x.db", "--enrollment",
                "open", "--trust-proxy=false", "--rate-limit", "20", "--token-lifetime", "600", "--quiet",
            ], environment)
        #expect(overridden.listen.isIPv6)
        #expect(overridden.listen.port == 8443)
        #expect(overridden.issuer == "https://other.example")
        #expect(overridden.database == "x.db")
        #expect(overridden.enrollment == .open)
        #expect(overridden.trustProxy == false)
        #expect(overridden.failureLimit == 20)
        #expect(overridden.accessTokenLifetime == 600)
        #expect(overridden.logRequests == false)
    }

    @Test(
        "bad flags and values are usage errors",
        arguments: [
            ["--listen", "nowhere"], ["--listen", "127.0.0.1"], ["--listen", "example.com:80"],
            ["--enrollment", "maybe"],
            ["--issuer", "ftp://x"], ["--rate-limit", "0"], ["--frobnicate"], ["serve", "extra"], ["--db"], ["launch"],
            ["enroll"], ["enroll", "bad user"], ["revoke"], ["--threads", "many"], ["--db-connections", "0"],
            ["--signing-key-bits", "3000"],
            ["--db", "a", "--db", "b"], ["clients", "add"], ["clients", "remove"], ["clients", "rename", "x"],
            ["clients", "add", "a", "b"], ["approve", "abc"], ["revoke", "abcdefg"],
        ])
    func usageErrors(_ arguments: [String]) {
        #expect(throws: ServerConfigurationError.self) {
            _ = try ServerCommand.parse(arguments: arguments, environment: [:])
        }
        let output = CapturedOutput()
        #expect(ServerCommand.main(arguments: arguments, environment: [:], output: output.output) == 64)
        #expect(output.error.hasPrefix("keyauth-server: "))
    }

    @Test(
        "an unknown option last on the line is unknown, a known one without its value needs a value",
        arguments: [
            (["--bogus"], "keyauth-server: unknown option --bogus; see keyauth-server --help\n"),
            (["devices", "--bogus"], "keyauth-server: unknown option --bogus; see keyauth-server --help\n"),
            (["--listen", "127.0.0.1:0", "--db"], "keyauth-server: --db needs a value\n"),
            (["enroll", "alice", "--db"], "keyauth-server: --db needs a value\n"),
            (
                ["serve", "--lisen", "127.0.0.1:0"],
                "keyauth-server: unknown option --lisen; did you mean --listen? see keyauth-server --help\n"
            ),
            (
                ["devices", "--jsno"],
                "keyauth-server: unknown option --jsno; did you mean --json? see keyauth-server --help\n"
            ),
        ])
    func unknownOptionWording(_ arguments: [String], _ expected: String) {
        let output = CapturedOutput()
        #expect(ServerCommand.main(arguments: arguments, environment: [:], output: output.output) == 64)
        #expect(output.error == expected)
    }

    @Test("--help prints the usage with every command and variable")
    func help() {
        let output = CapturedOutput()
        #expect(ServerCommand.main(arguments: ["--help"], environment: [:], output: output.output) == 0)
        for word in ["serve", "enroll USER", "devices", "revoke KID", "--listen", "KEYAUTH_SERVER_DB", "--trust-proxy"]
        {
            #expect(output.standard.contains(word))
        }
    }

    @Test("--version and -V print the version keyauth --version prints; with anything else they are usage errors")
    func version() {
        for arguments in [["--version"], ["-V"]] {
            let output = CapturedOutput()
            #expect(ServerCommand.main(arguments: arguments, environment: [:], output: output.output) == 0)
            #expect(output.standard == "keyauth-server \(KeyAuthClient.version)\n")
            #expect(output.error.isEmpty)
        }
        for arguments in [["serve", "--version"], ["--version", "extra"], ["-V", "devices"]] {
            let output = CapturedOutput()
            #expect(ServerCommand.main(arguments: arguments, environment: [:], output: output.output) == 64)
            #expect(output.standard.isEmpty)
        }
    }

    @Test("enroll prints a code that registers a first device in code mode; devices lists it; revoke revokes it")
    func adminCommands() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        // Only `serve` creates a database; the admin commands need one.
        try StorageFactory.open(database).close()
        let enroll = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["enroll", "alice", "--db", database], environment: [:], output: enroll.output) == 0)
        let code = enroll.standard.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(code.count == 24)
        #expect(!enroll.error.contains(code))

        let api = try environment.directAPI { $0.enrollment = .code }
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key, code: code).status == 201)

        let list = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["devices"], environment: ["KEYAUTH_SERVER_DB": database], output: list.output) == 0)
        let row = list.standard.split(separator: "\n").dropFirst().first?.split(separator: " ").map(String.init)
        #expect(row?.count == 7)
        #expect(row?.prefix(4) == [key.publicKey.fingerprint, "alice", "active", "software"])
        #expect(row?.last == "test-device")

        let revoke = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["revoke", key.publicKey.fingerprint, "--db", database], environment: [:],
                output: revoke.output) == 0)
        #expect(revoke.standard.hasPrefix("revoked "))
        #expect(try api.storage.device(kid: key.publicKey.fingerprint)?.status == .revoked)
        #expect(try api.login(key).errorCode == "invalid_grant")

        let unknown = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["revoke", "nopenopenope", "--db", database], environment: [:], output: unknown.output) == 1)
        #expect(unknown.error.contains("no device"))
    }

    @Test("clients add prints an id and a secret that authenticate at /bc-authorize; list shows it; remove removes it")
    func clientCommands() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        try StorageFactory.open(database).close()
        let add = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["clients", "add", "Support desk", "--db", database], environment: [:], output: add.output)
                == 0)
        var printed: [String: String] = [:]
        for line in add.standard.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { printed[String(parts[0])] = String(parts[1]) }
        }
        let id = try #require(printed["client_id"])
        let secret = try #require(printed["client_secret"])
        #expect(secret.utf8.count == 43)
        #expect(!add.error.contains(secret))
        // Only the secret's hash is stored.
        let stored = try #require(try StorageFactory.open(database).client(id: id))
        #expect(stored.name == "Support desk")
        #expect(try stored.secretHash == CryptoPrimitives.sha256(Array(secret.utf8)))

        let api = try environment.directAPI { $0.failureLimit = 1000 }
        _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        #expect(try api.backchannelAuthorize(TestClient(id: id, secret: secret), user: "alice").status == 200)

        let list = CapturedOutput()
        #expect(
            ServerCommand.main(arguments: ["clients", "list", "--db", database], environment: [:], output: list.output)
                == 0)
        // Aligned columns like every listing, the name last as it may hold spaces.
        let lines = list.standard.split(separator: "\n")
        #expect(
            lines.first?.split(separator: " ") == [
                "CLIENT_ID", "CREATED", "TYPE", "REDIRECT_URIS", "POST_LOGOUT_REDIRECT_URIS", "ALLOWED_USERS", "NAME",
            ])
        #expect(lines.last?.hasPrefix("\(id)  ") == true)
        #expect(lines.last?.split(separator: " ").suffix(6) == ["confidential", "-", "-", "-", "Support", "desk"])
        #expect(lines.last?.hasSuffix("  Support desk") == true)
        #expect(!list.standard.contains(secret))
        let json = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["clients", "list", "--json", "--db", database], environment: [:], output: json.output) == 0)
        let clients = try #require(try JSONValue(parsing: json.standard).arrayValue)
        #expect(clients.first?["client_id"] == .string(id))
        #expect(clients.first?["name"] == .string("Support desk"))
        #expect(clients.first?["type"] == .string("confidential"))
        #expect(clients.first?["redirect_uris"] == .array([]))
        #expect(!json.standard.contains(secret))

        let remove = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["clients", "remove", id, "--db", database], environment: [:], output: remove.output) == 0)
        #expect(try api.backchannelAuthorize(TestClient(id: id, secret: secret), user: "alice").status == 401)
        let again = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["clients", "remove", id, "--db", database], environment: [:], output: again.output) == 1)
        #expect(again.error.contains("no client"))
        let badName = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["clients", "add", " padded", "--db", database], environment: [:], output: badName.output)
                == 64)
    }

    @Test("storage that cannot be opened is reported on one line with exit status 69")
    func storageUnavailable() {
        for database in ["/nonexistent-directory/x/y.db", "postgres://127.0.0.1:1/keyauth?connect_timeout=2"] {
            let output = CapturedOutput()
            let status = ServerCommand.main(
                arguments: ["devices", "--db", database], environment: [:], output: output.output)
            #expect(status == 69)
            #expect(output.error.hasPrefix("keyauth-server: "))
            #expect(output.error.split(separator: "\n").count == 1)
        }
    }

    @Test("serve names the database it cannot start on: a damaged SQLite file")
    func damagedDatabaseNamed() throws {
        let environment = TestEnvironment()
        let path = environment.directory.path + "/damaged.db"
        FileManager.default.createFile(
            atPath: path, contents: Data("SQLite format 3\0".utf8 + [UInt8](repeating: 0x5A, count: 8192)),
            attributes: [.posixPermissions: 0o600])
        let server = try KeyAuthServerProcess(
            name: "damaged", arguments: ["serve", "--listen", "127.0.0.1:0", "--db", path, "--config", "/dev/null"],
            logPath: environment.directory.path + "/damaged.log")
        #expect(server.waitUntilExit() == 69, "\(server.log)")
        #expect(server.log.hasPrefix("keyauth-server: \(path): "), "\(server.log)")
    }

    @Test("a stop asked for while the server starts (a database that does not answer) ends it at once, exit 0")
    func stopWhileStarting() throws {
        // A PostgreSQL address that accepts the connection and never answers: the server waits
        // in its start for the connect_timeout.
        let (listener, port) = try #require(loopbackListener())
        defer { close(listener) }
        let environment = TestEnvironment()
        let server = try KeyAuthServerProcess(
            name: "starting",
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--config", "/dev/null",
                "--db", "postgres://keyauth@127.0.0.1:\(port)/keyauth?connect_timeout=60",
            ], logPath: environment.databasePath + ".log")
        // Once the server has connected, it waits inside its start.
        var waiting = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        #expect(poll(&waiting, 1, 30_000) == 1, "\(server.log)")
        #expect(server.isRunning, "\(server.log)")
        // The stop handler is installed by Dispatch's own thread, perhaps after the connection;
        // before, SIGTERM's default action would end the server (status 143), not its handler.
        let deadline = Date().addingTimeInterval(20)
        while !Self.catchesSIGTERM(server.processID), Date() < deadline { usleep(10_000) }
        #expect(server.terminate() == 0, "\(server.log)")
        #expect(server.log.contains("keyauth-server: stopped before the server started"), "\(server.log)")
        #expect(!server.log.contains("listening on"))
    }

    /// Whether process `id` has a handler for SIGTERM (`SigCgt` in its `/proc` status).
    private static func catchesSIGTERM(_ id: pid_t) -> Bool {
        signalMask("SigCgt", of: id) & (1 << (UInt64(SIGTERM) - 1)) != 0
    }

    /// A signal mask line of process `id`'s `/proc` status (`SigCgt`: caught, `SigIgn`: ignored);
    /// 0 when it cannot be read.
    private static func signalMask(_ field: String, of id: pid_t) -> UInt64 {
        guard let status = try? String(contentsOfFile: "/proc/\(id)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
            let mask = UInt64(line.dropFirst(field.count + 1).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return 0 }
        return mask
    }

    @Test("the built binary prints help, serves until SIGTERM and then exits 0")
    func binary() throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("keyauth-server")
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            // `swift test` builds the executable along with the tests; a filtered build may not.
            return
        }
        let help = try run(binary, ["--help"])
        #expect(help.status == 0)
        #expect(help.standard.contains("usage: keyauth-server"))
        let version = try run(binary, ["--version"])
        #expect(version.status == 0)
        #expect(version.standard == "keyauth-server 0.1.0\n")

        let environment = TestEnvironment()
        let server = try KeyAuthServerProcess(
            name: "binary", arguments: ["serve", "--listen", "127.0.0.1:0", "--db", environment.databasePath],
            logPath: environment.databasePath + ".log")
        let port = try server.waitUntilListening()
        #expect(server.log.hasPrefix("keyauth-server: listening on http://127.0.0.1:"), "\(server.log)")
        let response = try SocketTransport(port: port).send(HTTPRequest(method: "GET", path: "/healthz"))
        #expect(response.status == 200)
        #expect(server.terminate() == 0)
        #expect(server.log.contains("GET /healthz 200"))
        #expect(server.log.contains("keyauth-server: stopped"))

        // SIGHUP (a closed terminal, a habit of asking daemons to reload) stops it as SIGTERM
        // does, rather than ending it at once (status 129) without the drain.
        let hungUp = try KeyAuthServerProcess(
            name: "hung-up", arguments: ["serve", "--listen", "127.0.0.1:0", "--db", environment.databasePath],
            logPath: environment.databasePath + ".hup.log")
        _ = try hungUp.waitUntilListening()
        #expect(hungUp.terminate(with: SIGHUP) == 0, "\(hungUp.log)")
        #expect(hungUp.log.contains("keyauth-server: stopped"), "\(hungUp.log)")

        // Started with SIGHUP ignored (`nohup`), it keeps ignoring it.
        let detached = try KeyAuthServerProcess(
            name: "nohup", arguments: ["serve", "--listen", "127.0.0.1:0", "--db", environment.databasePath],
            logPath: environment.databasePath + ".nohup.log", ignoringHangUp: true)
        let detachedPort = try detached.waitUntilListening()
        let hangUpBit: UInt64 = 1 << (UInt64(SIGHUP) - 1)
        #expect(Self.signalMask("SigIgn", of: detached.processID) & hangUpBit != 0)
        #expect(Self.signalMask("SigCgt", of: detached.processID) & hangUpBit == 0)
        kill(detached.processID, SIGHUP)
        let still = try SocketTransport(port: detachedPort).send(HTTPRequest(method: "GET", path: "/healthz"))
        #expect(still.status == 200)
        #expect(detached.isRunning)
        #expect(detached.terminate() == 0, "\(detached.log)")
    }

    private func run(_ binary: URL, _ arguments: [String]) throws -> (status: Int32, standard: String) {
        let run = try runProcess(binary.path, arguments, environment: KeyAuthServerProcess.environment)
        return (run.status, run.standardOutput)
    }
}

/// Collects what a command writes.
final class CapturedOutput: Sendable {
    private let standardLines = LockedLines()
    private let errorLines = LockedLines()

    var output: ServerCommand.Output {
        ServerCommand.Output(
            standard: { [standardLines] in standardLines.append($0) }, error: { [errorLines] in errorLines.append($0) })
    }

    var standard: String { standardLines.all.joined() }
    var error: String { errorLines.all.joined() }
}
