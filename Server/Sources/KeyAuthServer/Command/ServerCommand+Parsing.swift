import KeyAuth
import KeyAuthArguments

extension ServerCommand {
    /// Parses arguments (without the program name) and the environment.
    ///
    /// - Throws: ``ServerConfigurationError`` naming the bad flag or value.
    public static func parse(arguments: [String], environment: [String: String]) throws(ServerConfigurationError)
        -> Action
    {
        var arguments = arguments
        if arguments.contains("--help") || arguments.contains("-h") || arguments.first == "help" { return .help }
        if arguments == ["--version"] || arguments == ["-V"] { return .version }
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
                    "enroll: the user name must be \(InputRules.userRule)")
            }
            return .enroll(user: user, database: database)
        case "devices":
            let database = flags.value("--db") ?? environment["KEYAUTH_SERVER_DB"] ?? "keyauth-server.db"
            try flags.finish(allowingPositionals: 0)
            return .devices(database: database)
        case "keys":
            return try keysAction(flags: &flags, environment: environment)
        case "revoke":
            let database = flags.value("--db") ?? environment["KEYAUTH_SERVER_DB"] ?? "keyauth-server.db"
            let positionals = try flags.finish(allowingPositionals: 1)
            guard let kid = positionals.first else { throw ServerConfigurationError("revoke: missing KID") }
            return .revoke(kid: kid, database: database)
        case "clients":
            let database = flags.value("--db") ?? environment["KEYAUTH_SERVER_DB"] ?? "keyauth-server.db"
            let positionals = try flags.finish(allowingPositionals: 2)
            switch (positionals.first, positionals.count) {
            case ("add"?, 2): return .clients(.add(name: positionals[1]), database: database)
            case ("list"?, 1), (nil, 0): return .clients(.list, database: database)
            case ("remove"?, 2): return .clients(.remove(id: positionals[1]), database: database)
            default: throw ServerConfigurationError("clients: expected add NAME, list or remove ID")
            }
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
        if let mode = setting("--dpop", "DPOP") {
            guard let dpop = DPoPMode(rawValue: mode) else {
                throw ServerConfigurationError("--dpop: expected optional or required, got \(mode)")
            }
            configuration.dpop = dpop
        }
        let dpopNonce = try parseBool(environment["KEYAUTH_SERVER_DPOP_NONCE"], "KEYAUTH_SERVER_DPOP_NONCE")
        configuration.dpopNonce = flags.bool("--dpop-nonce") ?? dpopNonce ?? false
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
        if let value = try number("--cleanup-interval", "CLEANUP_INTERVAL", 1...3600) {
            configuration.cleanupIntervalSeconds = value
        }
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
        if let name = setting("--token-alg", "TOKEN_ALG") {
            configuration.tokenAlgorithm = try tokenAlgorithm(name, flag: "--token-alg")
        }
        if let file = setting("--signing-key-file", "SIGNING_KEY_FILE") {
            guard !file.isEmpty else { throw ServerConfigurationError("--signing-key-file: empty path") }
            configuration.signingKeyFile = file
        }
        return configuration
    }

    /// `keys list` and `keys rotate [--alg ALG] [--delay SECONDS]`, with `--db`, the server's
    /// `--token-lifetime` (for when previous keys retire) and `--signing-key-file` (which does not
    /// rotate) read like `serve` reads them.
    private static func keysAction(
        flags: inout FlagParser, environment: [String: String]
    ) throws(ServerConfigurationError) -> Action {
        func setting(_ flag: String, _ variable: String) -> String? {
            flags.value(flag) ?? environment["KEYAUTH_SERVER_" + variable]
        }
        var options = KeysOptions(database: setting("--db", "DB") ?? "keyauth-server.db")
        if let text = setting("--token-lifetime", "TOKEN_LIFETIME") {
            guard let value = Int64(text), (60...86_400).contains(value) else {
                throw ServerConfigurationError("--token-lifetime: expected a number from 60 to 86400, got \(text)")
            }
            options.tokenLifetime = value
        }
        options.signingKeyFile = setting("--signing-key-file", "SIGNING_KEY_FILE").flatMap { $0.isEmpty ? nil : $0 }
        let rotateAlgorithm = flags.value("--alg")
        let delay = flags.value("--delay")
        let configuredAlgorithm = environment["KEYAUTH_SERVER_TOKEN_ALG"]
        let positionals = try flags.finish(allowingPositionals: 1)
        switch positionals.first {
        case "list"?, nil:
            guard rotateAlgorithm == nil, delay == nil else {
                throw ServerConfigurationError("keys list takes no --alg or --delay; see keyauth-server --help")
            }
            return .keys(.list, options)
        case "rotate"?:
            var algorithm: JWSAlgorithm?
            if let name = rotateAlgorithm {
                algorithm = try tokenAlgorithm(name, flag: "--alg")
            } else if let name = configuredAlgorithm {
                algorithm = try tokenAlgorithm(name, flag: "KEYAUTH_SERVER_TOKEN_ALG")
            }
            var seconds = SigningKeyRotation.defaultDelay
            if let delay {
                guard let value = Int64(delay), (0...86_400).contains(value) else {
                    throw ServerConfigurationError("--delay: expected seconds from 0 to 86400, got \(delay)")
                }
                seconds = value
            }
            return .keys(.rotate(algorithm: algorithm, delay: seconds), options)
        case let other?:
            throw ServerConfigurationError("keys: unknown action \(other); expected list or rotate")
        }
    }

    /// `RS256`, `ES256` or `EdDSA`, as `--token-alg` and `keys rotate --alg` take them.
    private static func tokenAlgorithm(_ name: String, flag: String) throws(ServerConfigurationError)
        -> JWSAlgorithm
    {
        guard let algorithm = JWSAlgorithm(rawValue: name) else {
            throw ServerConfigurationError("\(flag): expected RS256, ES256 or EdDSA, got \(name)")
        }
        return algorithm
    }

    private static func parseBool(_ text: String?, _ name: String) throws(ServerConfigurationError) -> Bool? {
        guard let text else { return nil }
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off", "": return false
        default: throw ServerConfigurationError("\(name): expected true or false, got \(text)")
        }
    }
}

/// The server's command line as ``ArgumentParser`` splits it, with the server's messages: every
/// `--name` takes a value except the boolean flags, and an option no verb reads is refused once
/// the verb has read its own.
struct FlagParser {
    private static let booleanFlags: Set<String> = ["trust-proxy", "quiet", "dpop-nonce"]
    private var parsed: ParsedArguments

    init(arguments: [String]) throws(ServerConfigurationError) {
        do {
            parsed = try ArgumentParser.parse(arguments, syntax: .keyauthServer(flags: Self.booleanFlags))
        } catch {
            switch error {
            case .repeated(let name): throw ServerConfigurationError("--\(name) is given more than once")
            case .missingValue(let name): throw ServerConfigurationError("--\(name) needs a value")
            case .invalidBoolean(let name), .flagTakesNoValue(let name):
                throw ServerConfigurationError("--\(name): expected true or false")
            case .unknownOption(let option), .emptyValue(let option):
                throw ServerConfigurationError("unknown option \(option); see keyauth-server --help")
            }
        }
    }

    /// The value of `--name` (the flag spelled with its dashes).
    mutating func value(_ flag: String) -> String? {
        parsed.value(String(flag.dropFirst(2)))
    }

    /// The boolean `--name`, nil when absent.
    mutating func bool(_ flag: String) -> Bool? {
        parsed.flag(String(flag.dropFirst(2)))
    }

    /// Refuses flags nobody asked for and extra positionals; returns the positionals.
    @discardableResult
    func finish(allowingPositionals count: Int) throws(ServerConfigurationError) -> [String] {
        if let missing = parsed.readOptionsMissingValues().first {
            throw ServerConfigurationError("--\(missing) needs a value")
        }
        if let unknown = parsed.unreadOptions().first {
            throw ServerConfigurationError("unknown option --\(unknown); see keyauth-server --help")
        }
        guard parsed.positionals.count <= count else {
            throw ServerConfigurationError(
                "unexpected argument \(parsed.positionals[count]); see keyauth-server --help")
        }
        return parsed.positionals
    }
}
