import Dispatch
import Glibc
import KeyAuth
import Synchronization

/// A running server: storage, application, HTTP transport and the periodic cleanup, started
/// together and stopped in the right order; and the composition root, the one place where the
/// server's object graph is built.
///
/// Used by `keyauth-server serve` and by tests, which start it on port 0 and read ``port``.
package final class ServerRunner: Sendable {
    /// The HTTP transport.
    package let server: HTTPServer
    /// The metrics listener, unless it is off.
    package let metricsServer: HTTPServer?
    /// The application.
    package let responder: KeyAuthResponder
    /// The store, closed by ``stop()``.
    package let storage: any ServerStorage
    private let cleanup: RepeatingTimer
    /// Keeps a memory replay cache's lease ahead of the clock.
    private let leaseRenewal: ReplayLeaseRenewal
    /// The replay cache, saved by ``stop()`` when it is in memory.
    private let replay: ReplayGuard
    /// Held while serving a SQLite file (``SQLiteServeLock``).
    private let serveLock: SQLiteServeLock?
    private let now: @Sendable () -> Int64
    /// Reports what ``stop()`` could not do.
    private let report: @Sendable (String) -> Void
    /// The line `serve` logs at start when this host's clock is a little off the database's
    /// (``ClockSkewCheck``).
    package let clockSkewWarning: String?

    /// The bound port.
    package var port: UInt16 { server.port }
    /// The metrics listener's bound port, or nil when it is off.
    package var metricsPort: UInt16? { metricsServer?.port }
    /// The issuer URL (configured, or derived from the bound address).
    package var issuer: String { responder.issuer }
    /// The algorithm of the key signing access tokens now.
    package var tokenAlgorithm: JWSAlgorithm {
        (try? responder.service.tokens.keys.current(at: ServerClock.now()).entry.algorithm) ?? .rs256
    }

    /// Starts the server: reads its files, starts listening (publicly, and for metrics unless
    /// that is off), opens storage, loads or creates the signing key and schedules cleanup.
    ///
    /// In that order, so that a failed start leaves nothing behind: a wrong file or an address
    /// that cannot be bound stops it before the database is opened, and a later failure stops
    /// the listeners, saves the replay cache as a clean stop does, and removes the SQLite file
    /// when this start created it (``SQLiteServeLock``). Until the application is installed, both
    /// listeners answer 503.
    ///
    /// - Parameters:
    ///   - configuration: the settings.
    ///   - storage: an open store; by default the one `configuration.database` names.
    ///   - log: where request and error lines go.
    ///   - now: the clock.
    ///   - interrupted: whether a stop signal came meanwhile (`serve`'s), asked between the
    ///     steps: the start then undoes what it did, as a failed start does, rather than leave a
    ///     database half made (without tables, or without a signing key) or an existing one
    ///     marked as after a crash.
    /// - Throws: ``StorageError``, ``HTTPServerError``, `KeyAuthError` for a file or the signing
    ///   key, ``StartInterrupted``, or ``ClockSkewError`` when the host's clock is too far from the
    ///   database's.
    package init(
        configuration: ServerConfiguration, storage: (any ServerStorage)? = nil,
        log: any ServerLog = StandardErrorLog(),
        now: @escaping @Sendable () -> Int64 = ServerClock.now,
        interrupted: @escaping @Sendable () -> Bool = { false }
    ) throws {
        let onPostgres = storage?.sharesReplayClaims ?? StorageFactory.isPostgresURL(configuration.database)
        let replayMode = configuration.replayCache ?? (onPostgres ? .database : .memory)
        let files: ServeFiles
        let listeners: Listeners
        do {
            if replayMode == .memory, onPostgres {
                throw KeyAuthError(.invalidArgument, ServerConfiguration.memoryReplayCacheOnPostgres)
            }
            files = try ServeFiles(configuration)
            listeners = try Listeners(
                configuration, writesBlockUntilDurable: storage?.writesBlockUntilDurable ?? onPostgres)
        } catch {
            storage?.close()
            throw error
        }
        self.now = now
        report = { [format = configuration.logFormat] line in log.error(line, format: format) }
        server = listeners.server
        metricsServer = listeners.metrics
        var undo = StartUndo(listeners: listeners, storage: storage)
        do {
            try Self.stopIfInterrupted(interrupted)
            let (opened, lock) =
                try storage.map { ($0, nil) }
                ?? StorageFactory.openForServing(
                    configuration.database, alone: replayMode == .memory,
                    postgresConnections: configuration.databaseConnections)
            undo.storage = opened
            undo.lock = lock
            // The host's clock, not `now`: tests inject clocks of their own.
            let clockReadings = try opened.databaseTime().map { (server: ServerClock.now(), database: $0) }
            let skewWarning: String?
            switch clockReadings.map({ ClockSkewCheck.verdict(server: $0.server, database: $0.database) }) {
            case .refuses(let reason): throw ClockSkewError(description: reason)
            case .warns(let line): skewWarning = line
            case .agrees, nil: skewWarning = nil
            }
            try Self.stopIfInterrupted(interrupted)
            let replay = try ReplayGuard.start(mode: replayMode, storage: opened, now: now())
            undo.replay = replay
            let collaborators = try Self.compose(
                configuration: configuration, issuer: configuration.resolvedIssuer(boundPort: server.port),
                storage: opened, log: log, now: now, replay: replay, files: files)
            try Self.stopIfInterrupted(interrupted)
            // `serve` reports the start's verdict itself; the cleanups report changes from it.
            if let clockReadings {
                _ = collaborators.service.clockSkew.record(
                    server: clockReadings.server, database: clockReadings.database)
            }
            collaborators.metrics.observeConnections { [server = listeners.server] in server.connectionFigures }
            responder = KeyAuthResponder(collaborators)
            self.storage = opened
            self.replay = replay
            serveLock = lock
            clockSkewWarning = skewWarning
        } catch {
            let removed = undo.run(now: now())
            guard error is StartInterrupted else { throw error }
            throw StartInterrupted(removedDatabase: removed ? configuration.database : nil)
        }
        listeners.install(responder)
        let responder = self.responder
        responder.watchClockSteps()
        responder.purgeExpired()
        cleanup = RepeatingTimer(intervalSeconds: configuration.cleanupIntervalSeconds) { responder.purgeExpired() }
        leaseRenewal = ReplayLeaseRenewal(replay: replay, storage: self.storage, now: now, report: report)
        leaseRenewal.start()
    }

    /// Stops accepting connections, finishes requests in progress, stops the cleanup and closes
    /// storage. Idempotent.
    package func stop() {
        server.stop()
        metricsServer?.stop()
        cleanup.cancel()
        leaseRenewal.cancel()
        do {
            try replay.stop(storage: storage, now: now())
        } catch {
            // The marker of a running cache stays: the next start applies the restart rule.
            report(
                "the replay cache could not be saved (\(error.message)); the next start refuses tokens issued "
                    + "before it + \(ReplayGuard.issuedAtLeeway) s")
        }
        storage.close()
    }

    /// Builds the application on `storage`: signing keys (from the key file when one is
    /// configured, else from storage, created on first start), access tokens, the assertion
    /// verifier, the device registry and the service, the attempt limits and the metrics.
    ///
    /// - Parameter files: what `configuration`'s files hold, when the caller has read them
    ///   already (``ServeFiles``); read here otherwise.
    /// - Throws: ``StorageError``, or `KeyAuthError` when the signing key cannot be created or
    ///   read, or a decoy key cannot be made.
    static func compose(
        configuration: ServerConfiguration, issuer: String, storage: any ServerStorage, log: any ServerLog,
        now: @escaping @Sendable () -> Int64, replay: ReplayGuard = ReplayGuard(), files: ServeFiles? = nil
    ) throws -> KeyAuthResponder.Collaborators {
        let files = try files ?? ServeFiles(configuration)
        // The decoys for the common key sizes (2048, 3072, 4096 bits), made now so that no
        // request pays for them.
        try DecoyKeys.shared.prepare([256, 384, 512])
        let signingKeys =
            if let fileKeys = files.signingKeys {
                fileKeys
            } else {
                try ServerSigningKeys.loadOrCreate(
                    storage: storage, algorithm: configuration.tokenAlgorithm, rsaBits: configuration.signingKeyBits,
                    now: now())
            }
        let clock = KeyAuthClock.seconds(now)
        let metrics = ServerMetrics()
        let logFormat = configuration.logFormat
        let service = KeyAuthService(
            settings: KeyAuthService.Settings(
                issuer: issuer, enrollment: configuration.enrollment,
                maximumPendingDevices: configuration.maximumPendingDevices,
                accessTokenLifetime: configuration.accessTokenLifetime,
                offlineGrantLifetime: configuration.offlineGrantLifetime,
                dpop: DPoPSettings(
                    mode: configuration.dpop,
                    nonces: configuration.dpopNonce ? ServerNonces(keys: signingKeys) : nil),
                attestation: AttestationSettings(
                    nonces: ServerNonces(keys: signingKeys, purpose: .attestation),
                    verifier: TPMAttestationVerifier(roots: configuration.tpmRoots)),
                devicePolicy: configuration.devicePolicy,
                devicePolicyReporter: DevicePolicyReporter(
                    log: { line in log.notice(line, format: logFormat) },
                    count: { event, mode in metrics.recordPolicyRefusal(at: event, mode: mode.rawValue) })),
            registry: DeviceRegistry(configuration: configuration, storage: storage, now: now),
            tokens: AccessTokens(
                keys: signingKeys, issuer: issuer, lifetime: configuration.accessTokenLifetime,
                requireDPoP: configuration.dpop == .required, clock: clock),
            enrollmentCodes: EnrollmentCodes(
                storage: storage, lifetime: configuration.enrollmentCodeLifetime, now: now),
            recoveryCodes: RecoveryCodes(
                storage: storage, iterations: configuration.recoveryCodeIterations,
                gate: SlowHashGate(slots: configuration.slowHashSlots), now: now),
            assertions: DeviceAssertionVerifier(audience: issuer, clock: clock),
            loginKeys: LoginKeys(cache: DeviceKeyCache(), decoys: .shared),
            signIn: SignInRequests(
                storage: storage, settings: SignInRequests.Settings(lifetime: configuration.signInLifetime),
                watchers: SignInRequestWatchers(
                    maximumWaiters: configuration.maximumLongPolls,
                    maximumWaitersPerUser: configuration.maximumLongPollsPerUser),
                now: now),
            clients: ClientRegistry(storage: storage, now: now), replay: replay)
        let limits = AttemptLimits(
            failures: AddressRateLimiter(
                limit: configuration.failureLimit, window: configuration.failureWindowSeconds, now: now),
            registrations: AddressRateLimiter(
                limit: configuration.registrationLimit, window: configuration.failureWindowSeconds, now: now),
            signInStarts: AddressRateLimiter(
                limit: configuration.registrationLimit, window: configuration.failureWindowSeconds, now: now),
            sshFetches: AddressRateLimiter(
                limit: AttemptLimits.sshFetchesPerWindow, window: configuration.failureWindowSeconds, now: now),
            sshCertificates: AddressRateLimiter(
                limit: AttemptLimits.sshCertificatesPerWindow, window: configuration.failureWindowSeconds, now: now),
            authorizationCodes: AddressRateLimiter(
                limit: AttemptLimits.authorizationCodesPerWindow, window: configuration.failureWindowSeconds, now: now))
        let sshCertificates = files.sshAuthorities.map { authorities in
            var issuer = SSHCertificateIssuer(
                authorities: authorities,
                settings: SSHCertificateIssuer.Settings(
                    lifetime: configuration.sshCertificateLifetime,
                    permitPortForwarding: !configuration.sshNoPortForwarding),
                audit: AuditTrail(storage: storage, now: now), now: now,
                revocationLists: SSHRevocationListCache(signal: service.registry.revocations, now: now))
            issuer.principalMap = files.sshPrincipalMap
            return issuer
        }
        return KeyAuthResponder.Collaborators(
            service: service, signingKeys: signingKeys, limits: limits, metrics: metrics, log: log,
            trustProxy: configuration.trustProxy, logRequests: configuration.logRequests,
            logFormat: configuration.logFormat,
            maximumBodySize: configuration.maximumBodySize, sshCertificates: sshCertificates)
    }
}

extension DeviceRegistry {
    /// The registry with the device lifetimes of `configuration` (the defaults for the admin
    /// commands, which take no serve options).
    init(configuration: ServerConfiguration, storage: any ServerStorage, now: @escaping @Sendable () -> Int64) {
        self.init(
            storage: storage, pendingLifetime: configuration.pendingLifetime,
            deviceRetention: configuration.deviceRetention, now: now)
    }
}
