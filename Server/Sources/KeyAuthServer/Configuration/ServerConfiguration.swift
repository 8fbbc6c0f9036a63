import Glibc
import KeyAuth

/// How a new user enrolls a first device (PROTOCOL.md section 4, "Register").
///
/// Either way, a user the server already knows (any device record, even revoked) gets a new
/// device only by approval from one of their active devices or with a code: a name is never
/// handed to whoever asks for it after its owner lost their last device.
package enum EnrollmentMode: String, Sendable, CaseIterable {
    /// A new user's first device becomes active at once: anyone who reaches the server can
    /// claim any unused user name. For development on loopback.
    case open
    /// A new user's first device needs a one-time code from `keyauth-server enroll USER` (the
    /// default).
    case code
}

/// Whether access tokens must be bound to the device key with DPoP (RFC 9449) (`--dpop`).
package enum DPoPMode: String, Sendable, CaseIterable {
    /// A token request with a DPoP proof gets a DPoP-bound token, one without gets a Bearer
    /// token (the default, so that scripts can still use `keyauth token`).
    case optional
    /// Token requests without a proof are refused, and so are Bearer tokens at the resource
    /// endpoints: a copied token is worthless without the device key.
    case required
}

/// Where `/metrics` is served (`--metrics-listen`).
package enum MetricsListener: Sendable, Equatable {
    /// 127.0.0.1 on the port after the public listener's (`127.0.0.1:8089` beside `:8088`), or a
    /// port the kernel picks when the public one is 0: loopback only unless told otherwise.
    case besidePublicListener
    /// This address.
    case address(ListenAddress)
    /// No metrics listener (`off`).
    case off
}

/// Everything `keyauth-server serve` can be told, with the documented defaults.
///
/// Filled from flags and `KEYAUTH_SERVER_*` environment variables by ``ServerCommand``; tests
/// build it directly.
package struct ServerConfiguration: Sendable {
    /// Where to listen (`--listen`, default `127.0.0.1:8088`).
    package var listen: ListenAddress
    /// The public base URL: `iss` and `aud` of every token (`--issuer`, default
    /// `http://HOST:PORT` of the bound address).
    package var issuer: String?
    /// The storage: a SQLite file path or a `postgres://` URL (`--db`).
    package var database: String = "keyauth-server.db"
    /// Whether first devices need an enrollment code (`--enrollment`, default `code`).
    package var enrollment: EnrollmentMode = .code
    /// Whether to take the client address from the last `X-Forwarded-For` hop
    /// (`--trust-proxy`). Only behind a proxy that sets it, or clients choose their address.
    package var trustProxy: Bool = false
    /// Failed logins and registrations allowed per client address and window (`--rate-limit`).
    package var failureLimit: Int = 10
    /// Registration attempts allowed per client address and window, successful or not
    /// (`--registration-limit`).
    package var registrationLimit: Int = 20
    /// The rate-limit window in seconds, for both limits.
    package var failureWindowSeconds: Int64 = 60
    /// Access token lifetime in seconds (`--token-lifetime`, PROTOCOL.md section 3: 900).
    package var accessTokenLifetime: Int64 = 900
    /// Offline grant lifetime in seconds (`--offline-grant-lifetime`, PROTOCOL.md section 7.2,
    /// "Offline grants": 7 days): how long a host accepts a device's logins without reaching the
    /// server, and so how long a revoked device keeps working on a host that stays offline.
    package var offlineGrantLifetime: Int64 = 604_800
    /// How long a pending device waits for approval before it expires (section 4: 10 minutes).
    package var pendingLifetime: Int64 = defaultPendingLifetime
    /// Ten minutes (PROTOCOL.md section 4).
    package static let defaultPendingLifetime: Int64 = 600
    /// The most pending (not yet expired) devices one user may have; registrations beyond get
    /// 429 `slow_down` (PROTOCOL.md section 4), so nobody can flood a user's approval list.
    package var maximumPendingDevices: Int = 10
    /// How long expired pending devices and denied devices are kept before the periodic
    /// cleanup deletes them: 24 hours, long enough for a client to see `expired_token` or
    /// `access_denied`. Revoked devices are kept for good, as history.
    package var deviceRetention: Int64 = defaultDeviceRetention
    /// 24 hours (PROTOCOL.md section 5).
    package static let defaultDeviceRetention: Int64 = 86_400
    /// How long an enrollment code is valid.
    package var enrollmentCodeLifetime: Int64 = 900
    /// PBKDF2 iterations for new recovery codes: no option sets it; tests lower it so that they
    /// do not spend seconds hashing.
    package var recoveryCodeIterations: Int = RecoveryCodes.defaultIterations
    /// Typed recovery codes checked at once, server-wide (``SlowHashGate``): no option sets it;
    /// tests set 0 to find every slot taken.
    package var slowHashSlots: Int = SlowHashGate.defaultSlots
    /// Size of the server's RSA signing key, generated on first start.
    package var signingKeyBits: Int = 2048
    /// Whether tokens must be DPoP-bound (`--dpop`, default optional).
    package var dpop: DPoPMode = .optional
    /// Whether DPoP proofs must carry a nonce the server handed out (`--dpop-nonce`), which
    /// bounds how long a proof made in advance stays usable to the nonce's lifetime.
    package var dpopNonce: Bool = false
    /// Where the trusted roots of TPM endorsement key certificates were read from (`--tpm-ca`,
    /// a PEM file or a directory of them); nil for none, when no attested registration reaches
    /// the tier `attested`.
    package var tpmCA: String?
    /// The certificates read from ``tpmCA``.
    package var tpmRoots: TPMEndorsementRoots = .none
    /// Which device tiers may register and log in (`--device-policy`, default any), and whether
    /// the rest are refused or only reported (`--device-policy-mode`, default enforce).
    package var devicePolicy = DevicePolicy()
    /// The algorithm of the signing key made on first start (`--token-alg`, default RS256, which
    /// RFC 9068 requires every party to support; ES256 signs far faster). A database that has
    /// keys keeps them: `keyauth-server keys rotate --alg` changes the algorithm.
    package var tokenAlgorithm: JWSAlgorithm = .rs256
    /// Where accepted assertions and DPoP proofs are remembered (`--replay-cache`); nil for the
    /// storage's default: memory on SQLite, the database on PostgreSQL.
    package var replayCache: ReplayCacheMode?
    /// A PEM file holding the one signing key (`--signing-key-file`), instead of a key kept in
    /// the database; see ``ServerSigningKeys/load(file:)``.
    package var signingKeyFile: String?
    /// The SSH user CA's key file (`--ssh-ca-key-file`); nil for a server that issues no SSH
    /// certificates. See ``SSHCertificateAuthority/load(file:)``.
    package var sshCAKeyFile: String?
    /// The principals of SSH certificates besides the user's name (`--ssh-principals-file`); nil
    /// for the name only. See ``SSHPrincipalMap``.
    package var sshPrincipalsFile: String?
    /// How long an SSH certificate is valid (`--ssh-certificate-lifetime`, default 8 hours).
    package var sshCertificateLifetime: Int64 = 8 * 3600
    /// The longest a sign-in request waits for its answer (`--sign-in-lifetime`, default 5
    /// minutes): a push login to a host waits that long at most.
    package var signInLifetime: Int64 = 300
    /// Certificates without `permit-port-forwarding` (`--ssh-no-port-forwarding`).
    package var sshNoPortForwarding = false
    /// Connections to PostgreSQL the server keeps (`--db-connections`); each call to storage
    /// holds one, and a call that finds none free waits up to 10 s, then answers 503. SQLite
    /// has a writer and readers of its own.
    package var databaseConnections = PostgresStorage.defaultPoolSize
    /// libmicrohttpd worker threads (`--threads`); nil for the default of the storage, see
    /// ``HTTPServerOptions/defaultThreadPoolSize(writesBlockUntilDurable:)``.
    package var threads: Int?
    /// Long polls of `GET /v1/auth-requests?wait=` that may wait at once; nil for half of
    /// ``connectionLimit``. A waiting poll holds no worker thread (its connection is suspended)
    /// but keeps a connection slot and costs a storage read a second, so watching devices never
    /// take every slot. Further long polls are answered at once.
    package var longPolls: Int?

    /// The worker threads a server on storage whose writes do (PostgreSQL) or do not (SQLite)
    /// block until durable runs: ``threads``, or the storage's default.
    package func workerThreads(writesBlockUntilDurable: Bool) -> Int {
        threads ?? HTTPServerOptions.defaultThreadPoolSize(writesBlockUntilDurable: writesBlockUntilDurable)
    }

    /// ``longPolls``, or half the connection limit, at least one.
    package var maximumLongPolls: Int {
        longPolls ?? max(1, connectionLimit / 2)
    }
    /// Long polls of one user that may wait at once (``SignInRequestWatchers``).
    package var maximumLongPollsPerUser = 8
    /// Simultaneous connections (`--max-connections`).
    package var connectionLimit: Int = 1000
    /// Simultaneous connections from one address, 0 for no limit
    /// (`--max-connections-per-address`; see ``HTTPServerOptions/connectionsPerAddressLimit``).
    /// The command line makes it 0 with `--trust-proxy` unless given: behind a proxy every
    /// connection comes from the proxy's address.
    package var connectionsPerAddressLimit: Int = HTTPServerOptions.defaultConnectionsPerAddressLimit
    /// Idle seconds before a connection is closed (`--connection-timeout`; see
    /// ``HTTPServerOptions/connectionTimeoutSeconds``).
    package var connectionTimeoutSeconds: Int = HTTPServerOptions.defaultConnectionTimeoutSeconds
    /// Seconds a connection has to deliver each complete request (`--request-timeout`; see
    /// ``RequestDeadlines``).
    package var requestTimeoutSeconds: Int = HTTPServerOptions.defaultRequestTimeoutSeconds
    /// The largest request body accepted (PROTOCOL.md section 4: 64 KiB, else 413).
    package var maximumBodySize: Int = 64 * 1024
    /// Seconds between purges of expired replay-cache entries, codes and rate-limit counters,
    /// which also reload the signing keys (publishing a rotated key) and retire old ones
    /// (`--cleanup-interval`).
    package var cleanupIntervalSeconds: Int = Self.defaultCleanupIntervalSeconds
    /// The default `--cleanup-interval`, which `ssh-ca rotate` also assumes.
    package static let defaultCleanupIntervalSeconds = 60
    /// Whether to write one line per request to stderr.
    package var logRequests: Bool = true
    /// Text or JSON log lines (`--log-format`, default text).
    package var logFormat: LogFormat = .text
    /// Where `/metrics` (and `/healthz`) are served apart from the public listener.
    package var metricsListener: MetricsListener = .besidePublicListener

    /// A configuration with every default, listening on `listen`.
    package init(listen: ListenAddress) {
        self.listen = listen
    }

    /// The warning `serve` prints at start for open enrollment on a server other machines can
    /// reach (``exposure``), where anyone could claim every unused user name; nil otherwise.
    package var openEnrollmentWarning: String? {
        guard enrollment == .open, !exposure.isEmpty else { return nil }
        return "warning: --enrollment open on a server that \(exposure.joined(separator: ", ")): anyone who "
            + "reaches the server can register a first device for any unused user name; use --enrollment code "
            + "(the default) outside development"
    }

    /// Why `serve` refuses to start, or nil: open enrollment with the SSH CA, where anyone who
    /// reaches the server could register a first device for `root` (or any account name not yet
    /// a keyauth user) and get a certificate naming it.
    ///
    /// A loopback listener does not make that safe: every local user of the machine reaches it,
    /// and a proxy or tunnel may put it anywhere.
    ///
    /// - Warning: a host that accepts a certificate whose principal equals the login name (no
    ///   `AuthorizedPrincipalsFile`) would let that stranger in; code enrollment decides who gets
    ///   which name.
    package var sshEnrollmentProblem: String? {
        guard enrollment == .open, sshCAKeyFile != nil else { return nil }
        return "--enrollment open with --ssh-ca-key-file: anyone who reaches the server, every local user "
            + "included, could register any unused user name, root included, and get SSH certificates naming "
            + "it; use --enrollment code (the default) and keyauth-server enroll USER"
    }

    /// Why `serve` refuses these settings together, and the setting whose origin decides the
    /// exit status (64 for a flag or variable, 78 for the settings file), or nil. Checked when
    /// the command line is parsed, so that `check-config` refuses them too and `serve` stops
    /// before it binds or opens anything.
    package var conflict: (problem: String, setting: String)? {
        if let problem = sshEnrollmentProblem { return (problem, "enrollment") }
        if replayCache == .memory, StorageFactory.isPostgresURL(database) {
            return (Self.memoryReplayCacheOnPostgres, "replay-cache")
        }
        if sshPrincipalsFile != nil, sshCAKeyFile == nil { return (Self.principalsWithoutCA, "ssh-principals-file") }
        return nil
    }

    /// The refusal of `--replay-cache memory` with PostgreSQL.
    static let memoryReplayCacheOnPostgres =
        "--replay-cache memory needs SQLite: servers sharing PostgreSQL share the cache; use --replay-cache database"
    /// The refusal of a principal map without an SSH CA.
    static let principalsWithoutCA = "--ssh-principals-file needs --ssh-ca-key-file"

    /// What makes the server reachable from other machines, each as words after "a server that":
    /// a listen address other than loopback, a proxy in front (`--trust-proxy`, as in the TLS
    /// deployment that listens on 127.0.0.1), an issuer (the URL clients use) whose host is not
    /// loopback. Empty for a server only this machine reaches.
    var exposure: [String] {
        var reasons: [String] = []
        if !Self.isLoopback(listen.host) { reasons.append("listens on \(listen)") }
        if trustProxy { reasons.append("trusts a proxy (--trust-proxy)") }
        if let issuer, !Self.isLoopbackURL(issuer) { reasons.append("has the issuer \(issuer)") }
        return reasons
    }

    /// Whether the URL `url` names a loopback host: `localhost`, or a loopback address.
    static func isLoopbackURL(_ url: String) -> Bool {
        guard var host = RedirectURI.parts(of: url)?.host else { return false }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host == "localhost" || isLoopback(host)
    }

    /// Whether `host` (a numeric address) is a loopback address: 127.0.0.0/8, `::1`, or an
    /// IPv4-mapped 127.x address.
    static func isLoopback(_ host: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: v6) { Array($0) }
        if bytes == Array(repeating: 0, count: 15) + [1] { return true }
        return bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] && bytes[12] == 127
    }

    /// The metrics listener's address, or nil when it is off.
    ///
    /// Beside a public port of 0 (tests), or of 65535 (which has no next port; the command line
    /// refuses that default), the kernel picks the port.
    package var metricsAddress: ListenAddress? {
        switch metricsListener {
        case .off: nil
        case .address(let address): address
        case .besidePublicListener:
            .loopback(port: listen.port == 0 || listen.port == UInt16.max ? 0 : listen.port + 1)
        }
    }

    /// The issuer, or `http://HOST:PORT` when none was configured.
    package func resolvedIssuer(boundPort: UInt16) -> String {
        if let issuer { return issuer }
        let host = listen.host == "0.0.0.0" ? "127.0.0.1" : listen.host
        return listen.isIPv6 ? "http://[\(host)]:\(boundPort)" : "http://\(host):\(boundPort)"
    }
}
