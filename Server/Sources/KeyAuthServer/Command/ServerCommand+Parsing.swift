import KeyAuth
import KeyAuthArguments

extension ServerCommand {
    /// Parses arguments (without the program name), the environment and the settings file.
    ///
    /// - Parameter defaultSettingsFile: the settings file read when it exists and neither
    ///   `--config` nor `KEYAUTH_SERVER_CONFIG` names one; nil for none.
    /// - Throws: ``ServerConfigurationError`` naming the bad flag, variable, or file and line.
    package static func parse(
        arguments: [String], environment: [String: String],
        defaultSettingsFile: String? = ServerCommand.defaultSettingsFile
    ) throws(ServerConfigurationError) -> Action {
        var arguments = arguments
        if arguments.first == "help" {
            guard arguments.count <= 2 else { throw ServerConfigurationError("help takes at most one command name") }
            guard let topic = arguments.last, topic != "help" else { return .help(topic: nil) }
            try checkVerb(topic)
            return .help(topic: topic)
        }
        if arguments == ["--version"] || arguments == ["-V"] { return .version }
        let verb: String
        let verbGiven = arguments.first.map { !$0.hasPrefix("-") } ?? false
        if verbGiven {
            verb = arguments.removeFirst()
            try checkVerb(verb)
        } else {
            verb = "serve"
        }
        if arguments.contains("--help") || arguments.contains("-h") { return .help(topic: verbGiven ? verb : nil) }
        var settings = try ServerSettings(
            flags: try FlagParser(arguments: arguments), environment: environment, defaultFile: defaultSettingsFile)
        if verb == "serve" || verb == "check-config" {
            let configuration = try serveConfiguration(&settings)
            try settings.finish(allowingPositionals: 0)
            if let (problem, setting) = configuration.conflict {
                throw ServerConfigurationError(problem, status: settings.origins[setting]?.status ?? ExitStatus.usage)
            }
            guard verb == "check-config" else { return .serve(configuration) }
            return .checkConfig(
                configuration, origins: settings.origins.mapValues(\.label), settingsFile: settings.file?.path)
        }
        // The admin commands: the database from --db, its variable or the settings file's db.
        let database = try databaseLocation(settings.value("--db")) ?? "keyauth-server.db"
        func positionals(_ count: Int, _ names: String) throws(ServerConfigurationError) -> [String] {
            let given = try settings.finish(allowingPositionals: count, checkingFile: false)
            guard given.count == count else { throw ServerConfigurationError("\(verb): missing \(names)") }
            return given
        }
        func user(_ name: String) throws(ServerConfigurationError) -> String {
            guard InputRules.isValidUser(name) else {
                throw ServerConfigurationError("\(verb): the user name must be \(InputRules.userRule)")
            }
            return name
        }
        switch verb {
        case "enroll":
            return .enroll(user: try user(try positionals(1, "USER")[0]), database: database)
        case "devices":
            var filter = DeviceFilter()
            filter.user = try settings.option("--user").map { name throws(ServerConfigurationError) in try user(name) }
            if let status = settings.option("--status") {
                let known: [DeviceStatus] = [.active, .pending, .expired, .denied, .revoked]
                guard known.contains(DeviceStatus(rawValue: status)) else {
                    throw ServerConfigurationError(
                        "--status: expected active, pending, expired, denied or revoked, got \(status)")
                }
                filter.status = DeviceStatus(rawValue: status)
            }
            filter.json = settings.commandFlag("--json") ?? false
            _ = try positionals(0, "")
            return .devices(filter, database: database)
        case "approve", "revoke":
            let kid = try positionals(1, "KID")[0]
            // Refused before opening the database: a usage error, whatever the storage.
            guard kid.count >= DeviceRegistry.minimumPrefixLength else {
                throw ServerConfigurationError(
                    "\(verb): a key ID prefix needs at least \(DeviceRegistry.minimumPrefixLength) characters, got \(kid)"
                )
            }
            return verb == "approve" ? .approve(kid: kid, database: database) : .revoke(kid: kid, database: database)
        case "users":
            let json = settings.commandFlag("--json") ?? false
            _ = try positionals(0, "")
            return .users(json: json, database: database)
        case "delete-user":
            return .deleteUser(user: try user(try positionals(1, "USER")[0]), database: database)
        case "backup":
            return .backup(destination: try positionals(1, "FILE")[0], database: database)
        case "keys":
            return try keysAction(&settings, database: database)
        case "clients":
            let redirects = settings.options("--redirect-uri")
            let logoutRedirects = settings.options("--post-logout-redirect-uri")
            let isPublic = settings.commandFlag("--public") ?? false
            let allowedUsers = settings.options("--allow-user")
            let kindName = settings.option("--kind")
            let json = settings.commandFlag("--json") ?? false
            let given = try settings.finish(allowingPositionals: 2, checkingFile: false)
            guard let kind = ClientKind(rawValue: kindName ?? "application") else {
                throw ServerConfigurationError("--kind: expected application or host")
            }
            guard !json || given.first == "list" || given.isEmpty else {
                throw ServerConfigurationError("--json: only clients list prints JSON")
            }
            switch (given.first, given.count) {
            case ("add", 2):
                return .clients(
                    .add(
                        name: given[1], redirectURIs: redirects, postLogoutRedirectURIs: logoutRedirects,
                        isPublic: isPublic, kind: kind, allowedUsers: allowedUsers),
                    database: database)
            case ("list", 1), (nil, 0): return .clients(.list(json: json), database: database)
            case ("remove", 2): return .clients(.remove(id: given[1]), database: database)
            default:
                throw ServerConfigurationError(
                    "clients: expected add NAME [--redirect-uri URI...] [--post-logout-redirect-uri URI...] "
                        + "[--public] [--kind host] [--allow-user USER...], list or remove ID\(suggestion(given.first, ["add", "list", "remove"]))"
                )
            }
        case "ssh-ca":
            return try sshCAAction(&settings, database: database)
        case "codes":
            let json = settings.commandFlag("--json") ?? false
            let given = try settings.finish(allowingPositionals: 2, checkingFile: false)
            switch (given.first, given.count) {
            case ("list", 1): return .listCodes(json: json, database: database)
            case ("revoke", 2) where json: throw ServerConfigurationError("--json: only codes list prints JSON")
            case ("revoke", 2): return .revokeCodes(user: try user(given[1]), database: database)
            default:
                throw ServerConfigurationError(
                    "codes: expected list, or revoke USER\(suggestion(given.first, ["list", "revoke"]))")
            }
        default:
            let since = try settings.option("--since").map { text throws(ServerConfigurationError) in
                try AuditStart(parsing: text)
            }
            let json = settings.commandFlag("--json") ?? false
            _ = try positionals(0, "")
            return .audit(since: since, json: json, database: database)
        }
    }

    /// Refuses a word that is no command, suggesting the nearest one.
    ///
    /// - Throws: ``ServerConfigurationError`` (exit 64) `unknown command enrol; did you mean
    ///   enroll? see keyauth-server --help`.
    private static func checkVerb(_ verb: String) throws(ServerConfigurationError) {
        guard !verbs.contains(verb) else { return }
        let nearest = NearestWord.nearest(to: verb, among: verbs).map { "; did you mean \($0)?" } ?? ";"
        throw ServerConfigurationError("unknown command \(verb)\(nearest) see keyauth-server --help")
    }

    /// `; did you mean WORD?` for the word of `candidates` nearest `typed`, or nothing.
    private static func suggestion(_ typed: String?, _ candidates: [String]) -> String {
        guard let typed, !candidates.contains(typed) else { return "" }
        return NearestWord.nearest(to: typed, among: candidates).map { "; did you mean \($0)?" } ?? ""
    }

    /// The commands, `serve` (the default) first.
    static let verbs = [
        "serve", "check-config", "enroll", "devices", "approve", "revoke", "users", "delete-user", "codes", "audit",
        "backup", "keys", "clients", "ssh-ca",
    ]

    /// `ssh-ca init|show|krl FILE|rotate|retire`, with the key file from `--ssh-ca-key-file`, its
    /// variable or the settings file, as `serve` reads it.
    private static func sshCAAction(
        _ settings: inout ServerSettings, database: String
    ) throws(ServerConfigurationError) -> Action {
        let keyType = settings.option("--alg")
        let overlapText = settings.option("--overlap")
        let lifetime = settings.value("--ssh-certificate-lifetime")
        let cleanupInterval = settings.value("--cleanup-interval")
        let keyFile = settings.value("--ssh-ca-key-file")
        let principalsFile = settings.value("--ssh-principals-file")
        let given = try settings.finish(allowingPositionals: 2, checkingFile: false)
        guard let keyFile, !keyFile.value.isEmpty else {
            throw ServerConfigurationError(
                "ssh-ca: needs --ssh-ca-key-file PATH (or ssh-ca-key-file in the settings file, see --config)")
        }
        guard given.count == 1 || given.first == "krl" else {
            throw ServerConfigurationError("ssh-ca: only krl takes a file name")
        }
        if let keyType, SSHCertificateAuthority.KeyType(rawValue: keyType) == nil {
            throw ServerConfigurationError("--alg: expected ed25519, ecdsa or rsa, got \(keyType)")
        }
        guard overlapText == nil || given.first == "rotate" else {
            throw ServerConfigurationError("--overlap: only ssh-ca rotate takes it")
        }
        // From the settings file or the environment it is serve's, and read wherever it is.
        for (setting, name) in [(lifetime, "--ssh-certificate-lifetime"), (cleanupInterval, "--cleanup-interval")] {
            if case .flag = setting?.origin, given.first != "rotate" {
                throw ServerConfigurationError("\(name): of ssh-ca, only rotate takes it")
            }
        }
        if case .flag = principalsFile?.origin, given.first != "krl" {
            throw ServerConfigurationError("--ssh-principals-file: of ssh-ca, only krl takes it")
        }
        if let principalsFile, principalsFile.value.isEmpty, given.first == "krl" {
            throw principalsFile.error("empty path")
        }
        switch given.first {
        case "krl" where keyType == nil:
            guard given.count == 2 else { throw ServerConfigurationError("ssh-ca krl: missing FILE") }
            return .sshCA(
                .revocationList(file: given[1], database: database, principalsFile: principalsFile?.value),
                keyFile: keyFile.value)
        case "init":
            return .sshCA(
                .initialize(keyType: keyType ?? SSHCertificateAuthority.KeyType.ed25519.rawValue),
                keyFile: keyFile.value)
        case "rotate":
            var overlap = SSHCertificateAuthorities.defaultOverlap
            if let overlapText {
                overlap = try ServerSettings.Setting(value: overlapText, origin: .flag("--overlap")).duration(
                    0...SSHCertificateAuthorities.maximumOverlap)
            }
            let certificateLifetime =
                try lifetime?.duration(60...SSHCertificateIssuer.maximumLifetime)
                ?? SSHCertificateIssuer.Settings().lifetime
            let cleanupSeconds =
                try cleanupInterval?.duration(1...3600) ?? Int64(ServerConfiguration.defaultCleanupIntervalSeconds)
            return .sshCA(
                .rotate(
                    keyType: keyType, overlap: overlap, certificateLifetime: certificateLifetime,
                    cleanupInterval: cleanupSeconds),
                keyFile: keyFile.value)
        case "show" where keyType == nil:
            return .sshCA(.show, keyFile: keyFile.value)
        case "retire" where keyType == nil:
            return .sshCA(.retire, keyFile: keyFile.value)
        case "show", "krl", "retire":
            throw ServerConfigurationError("--alg: only ssh-ca init and rotate make a key")
        default:
            throw ServerConfigurationError(
                "ssh-ca: expected init [--alg ed25519|ecdsa|rsa], show, krl FILE, rotate or retire"
                    + suggestion(given.first, ["init", "show", "krl", "rotate", "retire"]))
        }
    }

    /// The `--db` value of `setting`, checked: a PostgreSQL URL must be one libpq reads as
    /// written, and a libpq keyword/value string is refused rather than taken for a file name.
    ///
    /// The value may hold the database password, so no message quotes it.
    /// - Throws: ``ServerConfigurationError`` naming the setting's origin.
    static func databaseLocation(
        _ setting: ServerSettings.Setting?
    ) throws(ServerConfigurationError) -> String? {
        guard let setting else { return nil }
        guard !setting.value.isEmpty else { throw setting.error("empty path") }
        if StorageFactory.isPostgresURL(setting.value) {
            if let problem = PostgresLocation.problem(in: setting.value) { throw setting.error(problem) }
        } else if PostgresLocation.isKeywordValueString(setting.value) {
            throw setting.error(
                "a PostgreSQL keyword/value connection string is not supported; write it as a postgres:// URL")
        }
        return setting.value
    }

    /// `keys list` and `keys rotate [--alg ALG] [--delay DURATION]`, with the database, the
    /// server's `--token-lifetime` (for when previous keys retire) and `--signing-key-file` (which
    /// does not rotate) read as `serve` reads them.
    private static func keysAction(
        _ settings: inout ServerSettings, database: String
    ) throws(ServerConfigurationError) -> Action {
        var options = KeysOptions(database: database)
        if let lifetime = try settings.duration("--token-lifetime", 60...86_400) { options.tokenLifetime = lifetime }
        options.signingKeyFile = settings.value("--signing-key-file").flatMap { $0.value.isEmpty ? nil : $0.value }
        let rotateAlgorithm = settings.option("--alg")
        let delay = settings.option("--delay")
        let configuredAlgorithm = settings.value("--token-alg")
        let configuredBits = settings.value("--signing-key-bits")
        let json = settings.commandFlag("--json") ?? false
        let given = try settings.finish(allowingPositionals: 1, checkingFile: false)
        switch given.first {
        case "list"?, nil:
            guard rotateAlgorithm == nil, delay == nil else {
                throw ServerConfigurationError("keys list takes no --alg or --delay; see keyauth-server keys --help")
            }
            return .keys(.list(json: json), options)
        case "rotate"?:
            guard !json else { throw ServerConfigurationError("--json: only keys list prints JSON") }
            var algorithm: JWSAlgorithm?
            if let name = rotateAlgorithm {
                guard let chosen = JWSAlgorithm(rawValue: name) else {
                    throw ServerConfigurationError("--alg: expected RS256, ES256 or EdDSA, got \(name)")
                }
                algorithm = chosen
            } else if let configured = configuredAlgorithm {
                algorithm = try tokenAlgorithm(configured)
            }
            var seconds = SigningKeyRotation.defaultDelay
            if let delay {
                seconds = try ServerSettings.Setting(value: delay, origin: .flag("--delay")).duration(0...86_400)
            }
            let bits = try configuredBits?.signingKeyBits()
            return .keys(.rotate(algorithm: algorithm, delay: seconds, rsaBits: bits), options)
        case let other?:
            throw ServerConfigurationError(
                "keys: unknown action \(other); expected list or rotate\(suggestion(other, ["list", "rotate"]))")
        }
    }

    /// `RS256`, `ES256` or `EdDSA`, as `--token-alg` takes them.
    private static func tokenAlgorithm(_ setting: ServerSettings.Setting) throws(ServerConfigurationError)
        -> JWSAlgorithm
    {
        guard let algorithm = JWSAlgorithm(rawValue: setting.value) else {
            throw setting.error("expected RS256, ES256 or EdDSA, got \(setting.value)")
        }
        return algorithm
    }
}
