import Dispatch
import Glibc
import KeyAuth

/// The `keyauth-server` command line (PROTOCOL.md section 7): parsing, help, and the admin
/// commands, as a library so that it is testable with injected arguments, environment and output.
///
/// Flags override `KEYAUTH_SERVER_*` environment variables, which override defaults.
public enum ServerCommand {
    /// Exit statuses, from `sysexits.h` like the `keyauth` command.
    public enum ExitStatus {
        /// Success.
        public static let success: Int32 = 0
        /// Anything else.
        public static let failure: Int32 = 1
        /// Bad arguments or configuration.
        public static let usage: Int32 = 64
        /// A file that holds the server's secrets is exposed or unusable: a database or signing
        /// key file other users can read or that belongs to another user, or a signing key that
        /// is missing or not a usable RSA key (EX_DATAERR, as `keyauth` for key files).
        public static let dataError: Int32 = 65
        /// Storage or the listening address unavailable.
        public static let unavailable: Int32 = 69
    }

    /// What the arguments ask for.
    public enum Action: Sendable {
        /// Run the server.
        case serve(ServerConfiguration)
        /// Print a one-time enrollment code for a user.
        case enroll(user: String, database: String)
        /// List all devices.
        case devices(database: String)
        /// Revoke (or deny, when pending) a device.
        case revoke(kid: String, database: String)
        /// Print the help text.
        case help
    }

    /// Where a command writes: standard output and standard error, one string at a time.
    public struct Output: Sendable {
        /// Writes to standard output.
        public var standard: @Sendable (String) -> Void
        /// Writes to standard error.
        public var error: @Sendable (String) -> Void

        /// Creates an output.
        public init(standard: @escaping @Sendable (String) -> Void, error: @escaping @Sendable (String) -> Void) {
            self.standard = standard
            self.error = error
        }

        /// The process's standard output and standard error.
        public static let process = Output(
            standard: { text in
                let bytes = Array(text.utf8)
                _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            },
            error: { text in
                let bytes = Array(text.utf8)
                _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            })
    }

    /// The help text of `keyauth-server --help`.
    public static let helpText = """
        usage: keyauth-server [serve] [options]
               keyauth-server enroll USER [--db PATH]
               keyauth-server devices [--db PATH]
               keyauth-server revoke KID [--db PATH]

        Device-key login server for keyauth (JWT bearer assertions, RFC 7523).

        serve options (environment variable in brackets):
          --listen HOST:PORT        address to listen on, default 127.0.0.1:8088 [KEYAUTH_SERVER_LISTEN]
          --issuer URL              public base URL, iss and aud of tokens, default http://HOST:PORT
                                    [KEYAUTH_SERVER_ISSUER]
          --db PATH|postgres://...  storage, default keyauth-server.db in the current directory
                                    [KEYAUTH_SERVER_DB]; a SQLite file holds the signing key:
                                    it must be mode 600 and owned by the server's user
          --enrollment code|open    whether a new user's first device needs a code from 'enroll',
                                    default code; open is for development on loopback
                                    [KEYAUTH_SERVER_ENROLLMENT]
          --metrics-listen HOST:PORT|off
                                    where /metrics and /healthz are served, apart from the public
                                    listener; default 127.0.0.1 on the --listen port + 1
                                    [KEYAUTH_SERVER_METRICS_LISTEN]
          --trust-proxy             count the last X-Forwarded-For hop as the client address; only
                                    behind a proxy that sets it [KEYAUTH_SERVER_TRUST_PROXY=1]
          --rate-limit N            failed logins/registrations per address and minute, default 10
                                    [KEYAUTH_SERVER_RATE_LIMIT]; an address is an IPv4 address or
                                    an IPv6 /64
          --registration-limit N    registrations per address and minute, successful or not,
                                    default 20 [KEYAUTH_SERVER_REGISTRATION_LIMIT]
          --token-lifetime SECONDS  access token lifetime, default 900 [KEYAUTH_SERVER_TOKEN_LIFETIME]
          --threads N               HTTP worker threads, default one per core with SQLite, 32 with
                                    PostgreSQL [KEYAUTH_SERVER_THREADS]
          --max-connections N       simultaneous connections, default 1000 [KEYAUTH_SERVER_MAX_CONNECTIONS]
          --max-connections-per-address N
                                    simultaneous connections from one IP address, 0 for no limit;
                                    default 32, or 0 with --trust-proxy (limit at the proxy)
                                    [KEYAUTH_SERVER_MAX_CONNECTIONS_PER_ADDRESS]
          --request-timeout S       seconds a connection has to send each whole request, from its
                                    start or the previous response, default 10
                                    [KEYAUTH_SERVER_REQUEST_TIMEOUT]
          --connection-timeout S    idle seconds before a connection closes, default 10
                                    [KEYAUTH_SERVER_CONNECTION_TIMEOUT]
          --signing-key-bits N      size of the signing key made on first start, 2048 (default),
                                    3072 or 4096 [KEYAUTH_SERVER_SIGNING_KEY_BITS]
          --signing-key-file PATH   sign with this unencrypted PEM RSA key (2048 to 4096 bits, mode
                                    600, owned by the server's user) instead of a key kept in the
                                    database; it is then the only key published and accepted
                                    [KEYAUTH_SERVER_SIGNING_KEY_FILE]
          --quiet                   no per-request log lines [KEYAUTH_SERVER_QUIET=1]
          -h, --help                this text

        enroll, devices and revoke take --db (or KEYAUTH_SERVER_DB) too, and never create a
        database: only serve does.

        The server stops gracefully on SIGTERM or SIGINT. Exit status: 0 success, 64 usage error,
        65 a database or signing key file other users can read or that belongs to another user,
        or a signing key file that is missing or not a usable RSA key, 69 storage or address
        unavailable (or no database for an admin command), 1 anything else.

        """

    /// Parses arguments (without the program name) and the environment.
    ///
    /// - Throws: ``ServerConfigurationError`` naming the bad flag or value.
    public static func parse(arguments: [String], environment: [String: String]) throws(ServerConfigurationError)
        -> Action
    {
        var arguments = arguments
        if arguments.contains("--help") || arguments.contains("-h") || arguments.first == "help" { return .help }
        let verb: String
        if let first = arguments.first, !first.hasPrefix("-") {
            verb = first
            arguments.removeFirst()
        } else {
            verb = "serve"
        }
        var flags = try FlagParser(arguments: arguments)
        switch verb {
        case "serve":
            let configuration = try serveConfiguration(flags: &flags, environment: environment)
            try flags.finish(allowingPositionals: 0)
            return .serve(configuration)
        case "enroll":
            let database = flags.value("--db") ?? environment["KEYAUTH_SERVER_DB"] ?? "keyauth-server.db"
            let positionals = try flags.finish(allowingPositionals: 1)
            guard let user = positionals.first else { throw ServerConfigurationError("enroll: missing USER") }
            guard InputRules.isValidUser(user) else {
                throw ServerConfigurationError(
                    "enroll: the user name must be 1 to 64 characters of A-Z a-z 0-9 . _ @ -")
            }
            return .enroll(user: user, database: database)
        case "devices":
            let database = flags.value("--db") ?? environment["KEYAUTH_SERVER_DB"] ?? "keyauth-server.db"
            try flags.finish(allowingPositionals: 0)
            return .devices(database: database)
        case "revoke":
            let database = flags.value("--db") ?? environment["KEYAUTH_SERVER_DB"] ?? "keyauth-server.db"
            let positionals = try flags.finish(allowingPositionals: 1)
            guard let kid = positionals.first else { throw ServerConfigurationError("revoke: missing KID") }
            return .revoke(kid: kid, database: database)
        default:
            throw ServerConfigurationError("unknown command \(verb); see keyauth-server --help")
        }
    }

    private static func serveConfiguration(
        flags: inout FlagParser, environment: [String: String]
    ) throws(ServerConfigurationError) -> ServerConfiguration {
        func setting(_ flag: String, _ variable: String) -> String? {
            flags.value(flag) ?? environment["KEYAUTH_SERVER_" + variable]
        }
        func number(_ flag: String, _ variable: String, _ range: ClosedRange<Int>) throws(ServerConfigurationError)
            -> Int?
        {
            guard let text = setting(flag, variable) else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw ServerConfigurationError(
                    "\(flag): expected a number from \(range.lowerBound) to \(range.upperBound), got \(text)")
            }
            return value
        }
        var configuration = ServerConfiguration(
            listen: try ListenAddress(parsing: setting("--listen", "LISTEN") ?? "127.0.0.1:8088"))
        if let issuer = setting("--issuer", "ISSUER") {
            guard issuer.hasPrefix("http://") || issuer.hasPrefix("https://"), !issuer.contains("?"),
                !issuer.contains("#"), !issuer.contains(" ")
            else { throw ServerConfigurationError("--issuer: expected an http:// or https:// URL, got \(issuer)") }
            configuration.issuer = issuer
        }
        if let metrics = setting("--metrics-listen", "METRICS_LISTEN") {
            configuration.metricsListener =
                metrics == "off" ? .off : .address(try ListenAddress(parsing: metrics, flag: "--metrics-listen"))
        } else if configuration.listen.port == UInt16.max {
            throw ServerConfigurationError(
                "--metrics-listen: port 65535 has no next port for the default; pass --metrics-listen HOST:PORT or off")
        }
        if let database = setting("--db", "DB") {
            guard !database.isEmpty else { throw ServerConfigurationError("--db: empty path") }
            configuration.database = database
        }
        if let mode = setting("--enrollment", "ENROLLMENT") {
            guard let enrollment = EnrollmentMode(rawValue: mode) else {
                throw ServerConfigurationError("--enrollment: expected open or code, got \(mode)")
            }
            configuration.enrollment = enrollment
        }
        let trustProxy = try parseBool(environment["KEYAUTH_SERVER_TRUST_PROXY"], "KEYAUTH_SERVER_TRUST_PROXY")
        configuration.trustProxy = flags.bool("--trust-proxy") ?? trustProxy ?? false
        let quiet = try parseBool(environment["KEYAUTH_SERVER_QUIET"], "KEYAUTH_SERVER_QUIET")
        configuration.logRequests = !(flags.bool("--quiet") ?? quiet ?? false)
        if let value = try number("--rate-limit", "RATE_LIMIT", 1...100_000) { configuration.failureLimit = value }
        if let value = try number("--registration-limit", "REGISTRATION_LIMIT", 1...100_000) {
            configuration.registrationLimit = value
        }
        if let value = try number("--token-lifetime", "TOKEN_LIFETIME", 60...86_400) {
            configuration.accessTokenLifetime = Int64(value)
        }
        if let value = try number("--threads", "THREADS", 1...256) { configuration.threads = value }
        if let value = try number("--max-connections", "MAX_CONNECTIONS", 1...1_000_000) {
            configuration.connectionLimit = value
        }
        if let value = try number("--max-connections-per-address", "MAX_CONNECTIONS_PER_ADDRESS", 0...1_000_000) {
            configuration.connectionsPerAddressLimit = value
        } else if configuration.trustProxy {
            // Every connection comes from the proxy: a per-address limit would cap the proxy.
            configuration.connectionsPerAddressLimit = 0
        }
        if let value = try number("--request-timeout", "REQUEST_TIMEOUT", 1...3600) {
            configuration.requestTimeoutSeconds = value
        }
        if let value = try number("--connection-timeout", "CONNECTION_TIMEOUT", 1...3600) {
            configuration.connectionTimeoutSeconds = value
        }
        if let value = try number("--signing-key-bits", "SIGNING_KEY_BITS", 2048...4096) {
            guard [2048, 3072, 4096].contains(value) else {
                throw ServerConfigurationError("--signing-key-bits: expected 2048, 3072 or 4096")
            }
            configuration.signingKeyBits = value
        }
        if let file = setting("--signing-key-file", "SIGNING_KEY_FILE") {
            guard !file.isEmpty else { throw ServerConfigurationError("--signing-key-file: empty path") }
            configuration.signingKeyFile = file
        }
        return configuration
    }

    private static func parseBool(_ text: String?, _ name: String) throws(ServerConfigurationError) -> Bool? {
        guard let text else { return nil }
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off", "": return false
        default: throw ServerConfigurationError("\(name): expected true or false, got \(text)")
        }
    }

    /// Runs the command and returns the exit status. `serve` blocks until SIGTERM or SIGINT.
    ///
    /// Every verb first sets the umask to 077, so that whatever it creates (the SQLite database,
    /// its `-wal` and `-shm` files) is private to the server's user from the first byte.
    public static func main(
        arguments: [String], environment: [String: String], output: Output = .process,
        log: any ServerLog = StandardErrorLog()
    ) -> Int32 {
        umask(0o077)
        let action: Action
        do {
            action = try parse(arguments: arguments, environment: environment)
        } catch {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.usage
        }
        switch action {
        case .help:
            output.standard(helpText)
            return ExitStatus.success
        case .serve(let configuration):
            return serve(configuration, output: output, log: log)
        case .enroll(let user, let database):
            return withStorage(database, output: output) { storage in
                let code = try EnrollmentCodes(storage: storage).issue(for: user)
                output.error("keyauth-server: one-time enrollment code for \(user), valid 15 minutes:\n")
                output.standard(code + "\n")
            }
        case .devices(let database):
            return withStorage(database, output: output) { storage in
                let now = ServerClock.now()
                let pendingLifetime = ServerConfiguration.defaultPendingLifetime
                var lines = ["KID\tUSER\tNAME\tSTATUS\tCREATED\tLAST_LOGIN"]
                for device in try storage.allDevices() {
                    let expired = device.status == .pending && now >= device.createdAt + pendingLifetime
                    lines.append(
                        [
                            device.kid, device.user, device.name, expired ? "expired" : device.status.rawValue,
                            ServerClock.rfc3339(device.createdAt), device.lastLoginAt.map(ServerClock.rfc3339) ?? "-",
                        ].joined(separator: "\t"))
                }
                output.standard(lines.joined(separator: "\n") + "\n")
            }
        case .revoke(let kid, let database):
            return withStorage(database, output: output) { storage in
                guard let device = try storage.device(kid: kid) else {
                    throw ServerConfigurationError("no device \(kid)")
                }
                let now = ServerClock.now()
                switch device.status {
                case .active:
                    guard try storage.updateStatus(kid: kid, from: .active, to: .revoked, at: now) else {
                        throw ServerConfigurationError("the device \(kid) changed meanwhile; try again")
                    }
                    output.standard("revoked \(kid) (\(device.user))\n")
                case .pending:
                    guard try storage.updateStatus(kid: kid, from: .pending, to: .denied, at: now) else {
                        throw ServerConfigurationError("the device \(kid) changed meanwhile; try again")
                    }
                    output.standard("denied \(kid) (\(device.user))\n")
                case .revoked, .denied:
                    output.standard("\(kid) is already \(device.status.rawValue)\n")
                }
            }
        }
    }

    private static func withStorage(
        _ database: String, output: Output, _ body: (any ServerStorage) throws -> Void
    ) -> Int32 {
        let storage: any ServerStorage
        do {
            storage = try StorageFactory.open(database, creatingIfMissing: false)
        } catch {
            output.error("keyauth-server: \(error.description)\n")
            return exitStatus(for: error)
        }
        defer { storage.close() }
        do {
            try body(storage)
            return ExitStatus.success
        } catch let error as ServerConfigurationError {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.failure
        } catch let error as StorageError {
            output.error("keyauth-server: \(error.description)\n")
            return ExitStatus.unavailable
        } catch {
            output.error("keyauth-server: \(error)\n")
            return ExitStatus.failure
        }
    }

    /// The exit status for a storage failure at start: 64 for a kind of storage this build
    /// lacks, 65 for an exposed database file, 69 for anything else (unreachable, missing).
    private static func exitStatus(for error: StorageError) -> Int32 {
        switch error.code {
        case .unsupported: ExitStatus.usage
        case .unprotected: ExitStatus.dataError
        default: ExitStatus.unavailable
        }
    }

    /// Whether `error` says the signing key (from its file or from storage) cannot be used:
    /// missing, exposed, corrupt or against the key policy. Bad data, not a crash: exit 65.
    private static func isUnusableKey(_ error: KeyAuthError) -> Bool {
        [.keyNotFound, .keyUnprotected, .keyCorrupt, .keyRejected].contains(error.code)
    }

    /// Runs the server until SIGTERM or SIGINT, then shuts down gracefully.
    static func serve(_ configuration: ServerConfiguration, output: Output, log: any ServerLog) -> Int32 {
        // Signals become events on a dispatch source instead of killing the process; SIGPIPE
        // from a peer that hung up must not kill it either.
        signal(SIGPIPE, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let stopRequested = DispatchSemaphore(value: 0)
        let sources = [SIGTERM, SIGINT].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: DispatchQueue.global())
            source.setEventHandler { stopRequested.signal() }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }

        let runner: ServerRunner
        do {
            runner = try ServerRunner(configuration: configuration, log: log)
        } catch let error as StorageError {
            output.error("keyauth-server: \(error.description)\n")
            return exitStatus(for: error)
        } catch let error as HTTPServerError {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.unavailable
        } catch let error as KeyAuthError where Self.isUnusableKey(error) {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.dataError
        } catch {
            output.error("keyauth-server: cannot start: \(error)\n")
            return ExitStatus.failure
        }
        let address = Self.urlHost(runner.server.address)
        // On the same line, so that whoever waits for "listening on" finds the metrics port too.
        let metrics = runner.metricsServer.map { "metrics on http://\(Self.urlHost($0.address)):\($0.port)/metrics" }
        output.error(
            "keyauth-server: listening on http://\(address):\(runner.port) (issuer \(runner.issuer), "
                + "storage \(StorageFactory.isPostgresURL(configuration.database) ? "postgres" : configuration.database), "
                + "enrollment \(configuration.enrollment.rawValue)"
                + (configuration.signingKeyFile.map { ", signing key \($0)" } ?? "") + "), "
                + (metrics ?? "metrics off") + "\n")
        if let warning = configuration.openEnrollmentWarning { output.error("keyauth-server: \(warning)\n") }
        stopRequested.wait()
        output.error("keyauth-server: stopping: finishing requests in progress\n")
        runner.stop()
        output.error("keyauth-server: stopped\n")
        return ExitStatus.success
    }

    /// The host of `address` as a URL writes it (IPv6 in brackets).
    private static func urlHost(_ address: ListenAddress) -> String {
        address.isIPv6 ? "[\(address.host)]" : address.host
    }

    /// The process environment as a dictionary.
    public static func processEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}

/// Splits `--flag value`, `--flag=value` and boolean `--flag` arguments from positionals.
struct FlagParser {
    private static let booleanFlags: Set<String> = ["--trust-proxy", "--quiet"]
    private var values: [String: String] = [:]
    private var booleans: [String: Bool] = [:]
    private var positionals: [String] = []
    private var used: Set<String> = []

    init(arguments: [String]) throws(ServerConfigurationError) {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else {
                positionals.append(argument)
                continue
            }
            var name = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            guard values[name] == nil, booleans[name] == nil else {
                throw ServerConfigurationError("\(name) is given more than once")
            }
            if Self.booleanFlags.contains(name) {
                switch inline?.lowercased() {
                case nil, "true", "1", "yes": booleans[name] = true
                case "false", "0", "no": booleans[name] = false
                default: throw ServerConfigurationError("\(name): expected true or false")
                }
                continue
            }
            if let inline {
                values[name] = inline
            } else {
                guard index < arguments.count else { throw ServerConfigurationError("\(name) needs a value") }
                values[name] = arguments[index]
                index += 1
            }
        }
    }

    mutating func value(_ name: String) -> String? {
        used.insert(name)
        return values[name]
    }

    mutating func bool(_ name: String) -> Bool? {
        used.insert(name)
        return booleans[name]
    }

    /// Refuses flags nobody asked for and extra positionals; returns the positionals.
    @discardableResult
    func finish(allowingPositionals count: Int) throws(ServerConfigurationError) -> [String] {
        if let unknown = (Array(values.keys) + Array(booleans.keys)).sorted().first(where: { !used.contains($0) }) {
            throw ServerConfigurationError("unknown option \(unknown); see keyauth-server --help")
        }
        guard positionals.count <= count else {
            throw ServerConfigurationError("unexpected argument \(positionals[count]); see keyauth-server --help")
        }
        return positionals
    }
}
