import KeyAuth
import KeyAuthArguments

/// The settings of `serve` as one table, in the order of `--help`: how each is read from its
/// flag, variable or settings-file key, and how `check-config` shows its effective value. The
/// parser and `check-config` both walk this table, so a setting cannot be read without being
/// shown (`check-config` once left out `dpop`, `dpop-nonce`, `token-alg` and `cleanup-interval`).
extension ServerCommand {
    /// One setting of `serve`.
    struct ServeSetting: Sendable {
        /// The flag's name without dashes: the settings file's key.
        let key: String
        /// Reads the setting, when given, into the configuration; earlier rows are already read.
        let read: @Sendable (inout ServerSettings, inout ServerConfiguration) throws(ServerConfigurationError) -> Void
        /// The effective value as a flag would take it; empty when not set and without default.
        let show: @Sendable (ServerConfiguration) -> String
        /// Whether the flag takes no value (true or false; ``FlagParser/booleanFlags``).
        var isFlag = false
    }

    /// Every setting of `serve`, in the order of `--help` (a row may depend on earlier ones:
    /// `metrics-listen` on `listen`, `max-connections-per-address` on `trust-proxy`).
    static let serveSettings: [ServeSetting] = [
        ServeSetting(
            key: "listen",
            read: { settings, configuration throws(ServerConfigurationError) in
                if let listen = settings.value("--listen") { configuration.listen = try address(listen) }
            }, show: { $0.listen.description }),
        ServeSetting(
            key: "issuer",
            read: { settings, configuration throws(ServerConfigurationError) in
                guard let issuer = settings.value("--issuer") else { return }
                let url = issuer.value
                guard url.hasPrefix("http://") || url.hasPrefix("https://"), !url.contains("?"), !url.contains("#"),
                    !url.contains(" ")
                else { throw issuer.error("expected an http:// or https:// URL, got \(url)") }
                configuration.issuer = url
            }, show: { $0.resolvedIssuer(boundPort: $0.listen.port) }),
        ServeSetting(
            key: "db",
            read: { settings, configuration throws(ServerConfigurationError) in
                if let database = try databaseLocation(settings.value("--db")) { configuration.database = database }
            },
            show: { StorageFactory.isPostgresURL($0.database) ? PostgresLocation($0.database).redacted : $0.database }),
        choice("enrollment", \.enrollment, EnrollmentMode.init(rawValue:), "open or code"),
        choice("dpop", \.dpop, DPoPMode.init(rawValue:), "optional or required"),
        flag("dpop-nonce", \.dpopNonce),
        ServeSetting(
            key: "tpm-ca",
            read: { settings, configuration throws(ServerConfigurationError) in
                guard let path = settings.value("--tpm-ca") else { return }
                do throws(KeyAuthError) {
                    configuration.tpmRoots = try TPMEndorsementRoots.load(path: path.value)
                } catch {
                    throw path.error(error.message)
                }
                configuration.tpmCA = path.value
            }, show: { $0.tpmCA ?? "" }),
        choice("device-policy", \.devicePolicy.level, DevicePolicy.Level.init(rawValue:), "any, tpm or attested"),
        choice(
            "device-policy-mode", \.devicePolicy.mode, DevicePolicy.Mode.init(rawValue:), "monitor or enforce"),
        ServeSetting(
            key: "metrics-listen",
            read: { settings, configuration throws(ServerConfigurationError) in
                if let metrics = settings.value("--metrics-listen") {
                    configuration.metricsListener = metrics.value == "off" ? .off : .address(try address(metrics))
                } else if configuration.listen.port == UInt16.max {
                    throw ServerConfigurationError(
                        "--metrics-listen: port 65535 has no next port for the default; pass --metrics-listen HOST:PORT "
                            + "or off")
                }
            }, show: { $0.metricsAddress?.description ?? "off" }),
        flag("trust-proxy", \.trustProxy),
        number("rate-limit", \.failureLimit, 1...100_000),
        number("registration-limit", \.registrationLimit, 1...100_000),
        duration("token-lifetime", \.accessTokenLifetime, 60...86_400),
        duration("offline-grant-lifetime", \.offlineGrantLifetime, 3600...2_592_000),
        ServeSetting(
            key: "threads",
            read: { settings, configuration throws(ServerConfigurationError) in
                if let value = try settings.number("--threads", 1...256) { configuration.threads = value }
            }, show: { String($0.workerThreads(writesBlockUntilDurable: StorageFactory.isPostgresURL($0.database))) }),
        number("db-connections", \.databaseConnections, 1...256),
        duration("cleanup-interval", \.cleanupIntervalSeconds, 1...3600),
        number("max-connections", \.connectionLimit, 1...1_000_000),
        ServeSetting(
            key: "max-connections-per-address",
            read: { settings, configuration throws(ServerConfigurationError) in
                if let value = try settings.number("--max-connections-per-address", 0...1_000_000) {
                    configuration.connectionsPerAddressLimit = value
                } else if configuration.trustProxy {
                    // Every connection comes from the proxy: a per-address limit would cap the proxy.
                    configuration.connectionsPerAddressLimit = 0
                }
            }, show: { String($0.connectionsPerAddressLimit) }),
        duration("request-timeout", \.requestTimeoutSeconds, 1...3600),
        duration("connection-timeout", \.connectionTimeoutSeconds, 1...3600),
        ServeSetting(
            key: "signing-key-bits",
            read: { settings, configuration throws(ServerConfigurationError) in
                guard let bits = settings.value("--signing-key-bits") else { return }
                configuration.signingKeyBits = try bits.signingKeyBits()
            }, show: { String($0.signingKeyBits) }),
        choice("token-alg", \.tokenAlgorithm, JWSAlgorithm.init(rawValue:), "RS256, ES256 or EdDSA"),
        ServeSetting(
            key: "replay-cache",
            read: { settings, configuration throws(ServerConfigurationError) in
                guard let setting = settings.value("--replay-cache") else { return }
                guard let mode = ReplayCacheMode(rawValue: setting.value) else {
                    throw setting.error("expected memory or database, got \(setting.value)")
                }
                configuration.replayCache = mode
            },
            show: { ($0.replayCache ?? (StorageFactory.isPostgresURL($0.database) ? .database : .memory)).rawValue }),
        file("signing-key-file", \.signingKeyFile),
        file("ssh-ca-key-file", \.sshCAKeyFile),
        file("ssh-principals-file", \.sshPrincipalsFile),
        duration("ssh-certificate-lifetime", \.sshCertificateLifetime, 60...SSHCertificateIssuer.maximumLifetime),
        flag("ssh-no-port-forwarding", \.sshNoPortForwarding),
        duration("sign-in-lifetime", \.signInLifetime, 10...3600),
        ServeSetting(
            key: "quiet",
            read: { settings, configuration throws(ServerConfigurationError) in
                if let quiet = try settings.bool("--quiet") { configuration.logRequests = !quiet }
            }, show: { String(!$0.logRequests) }, isFlag: true),
        choice("log-format", \.logFormat, LogFormat.init(rawValue:), "text or json"),
    ]

    /// The configuration `serve` runs with: defaults, then each row of ``serveSettings``.
    static func serveConfiguration(_ settings: inout ServerSettings) throws(ServerConfigurationError)
        -> ServerConfiguration
    {
        var configuration = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:8088"))
        for setting in serveSettings { try setting.read(&settings, &configuration) }
        return configuration
    }

    /// A setting with a fixed set of words (`--enrollment code|open`).
    private static func choice<Value: RawRepresentable & Sendable>(
        _ key: String, _ path: WritableKeyPath<ServerConfiguration, Value> & Sendable,
        _ make: @escaping @Sendable (String) -> Value?, _ expected: String
    ) -> ServeSetting where Value.RawValue == String {
        ServeSetting(
            key: key,
            read: { settings, configuration throws(ServerConfigurationError) in
                guard let setting = settings.value("--" + key) else { return }
                guard let value = make(setting.value) else {
                    throw setting.error("expected \(expected), got \(setting.value)")
                }
                configuration[keyPath: path] = value
            }, show: { $0[keyPath: path].rawValue })
    }

    /// A file path, not empty (`--signing-key-file PATH`); unset when not given.
    private static func file(
        _ key: String, _ path: WritableKeyPath<ServerConfiguration, String?> & Sendable
    ) -> ServeSetting {
        ServeSetting(
            key: key,
            read: { settings, configuration throws(ServerConfigurationError) in
                guard let file = settings.value("--" + key) else { return }
                guard !file.value.isEmpty else { throw file.error("empty path") }
                configuration[keyPath: path] = file.value
            }, show: { $0[keyPath: path] ?? "" })
    }

    /// A boolean setting (`--trust-proxy`), false by default.
    private static func flag(_ key: String, _ path: WritableKeyPath<ServerConfiguration, Bool> & Sendable)
        -> ServeSetting
    {
        ServeSetting(
            key: key,
            read: { settings, configuration throws(ServerConfigurationError) in
                if let value = try settings.bool("--" + key) { configuration[keyPath: path] = value }
            }, show: { String($0[keyPath: path]) }, isFlag: true)
    }

    /// A whole number within `range` (`--rate-limit`).
    private static func number(
        _ key: String, _ path: WritableKeyPath<ServerConfiguration, Int> & Sendable, _ range: ClosedRange<Int>
    ) -> ServeSetting {
        ServeSetting(
            key: key,
            read: { settings, configuration throws(ServerConfigurationError) in
                if let value = try settings.number("--" + key, range) { configuration[keyPath: path] = value }
            }, show: { String($0[keyPath: path]) })
    }

    /// A duration within `range` seconds (`--token-lifetime 15m`), shown in the largest units.
    private static func duration<Value: BinaryInteger & Sendable>(
        _ key: String, _ path: WritableKeyPath<ServerConfiguration, Value> & Sendable, _ range: ClosedRange<Int64>
    ) -> ServeSetting {
        ServeSetting(
            key: key,
            read: { settings, configuration throws(ServerConfigurationError) in
                if let value = try settings.duration("--" + key, range) { configuration[keyPath: path] = Value(value) }
            }, show: { DurationText.text(Int64($0[keyPath: path])) })
    }

    /// A `HOST:PORT` setting.
    private static func address(_ setting: ServerSettings.Setting) throws(ServerConfigurationError) -> ListenAddress {
        do {
            return try ListenAddress(parsing: setting.value, flag: setting.origin.label)
        } catch {
            throw ServerConfigurationError(error.message, status: setting.origin.status)
        }
    }
}
