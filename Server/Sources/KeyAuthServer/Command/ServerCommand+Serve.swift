import Dispatch
import Glibc
import KeyAuth

extension ServerCommand {
    /// Whether `error` says the signing key (from its file or from storage) or another key file
    /// cannot be used: missing, exposed, unreadable, corrupt or against the key policy. Bad data,
    /// not a crash: exit 65. (At start, `.storageFailed` comes only from reading those files.)
    private static func isUnusableKey(_ error: KeyAuthError) -> Bool {
        [.keyNotFound, .keyUnprotected, .keyCorrupt, .keyRejected, .storageFailed].contains(error.code)
    }

    /// Runs the server until SIGTERM, SIGINT or SIGHUP, then shuts down gracefully.
    ///
    /// A signal during the start interrupts it (``ServeLifecycle``): the start undoes what it did
    /// and `serve` exits 0, as for any stop.
    static func serve(_ configuration: ServerConfiguration, output: Output, log: any ServerLog) -> Int32 {
        // SIGPIPE from a peer that hung up must never kill it.
        signal(SIGPIPE, SIG_IGN)
        // Every line serve writes has the log's format, so that a log shipper reading JSON
        // finds no text line, the start and stop included.
        let say = { @Sendable (message: String, level: String) in
            output.error(Self.lifecycleLine(message, level: level, format: configuration.logFormat) + "\n")
        }
        let stopRequested = DispatchSemaphore(value: 0)
        let lifecycle = ServeLifecycle()
        // Before anything is opened or created: until then a signal's default action ends the
        // process, which has nothing to undo yet.
        let caught = ServeSignals.install {
            switch lifecycle.signalReceived() {
            case .interruptStart:
                // Starting can wait (a database that does not answer); a stop asked for
                // meanwhile must not wait for it for ever.
                let grace = ServeLifecycle.interruptedStartGrace
                DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(grace)) {
                    guard lifecycle.abandon() else { return }
                    say("stopped before the server started, in a step that did not end within \(grace) s", "info")
                    _exit(ExitStatus.success)
                }
            case .exitNow:
                say("stopped before the server started, at once on a second signal", "info")
                _exit(ExitStatus.success)
            case .stop: stopRequested.signal()
            case .ignore: break
            }
        }
        guard caught else {
            say("cannot start: the handler of SIGTERM, SIGINT and SIGHUP cannot be installed", "error")
            return ExitStatus.failure
        }

        // Before anything opens a descriptor: the connections must fit in the open-file limit.
        var configuration = configuration
        let metricsConnections =
            configuration.metricsAddress == nil ? 0 : ServerRunner.Listeners.metricsConnectionLimit
        let threads = configuration.workerThreads(
            writesBlockUntilDurable: StorageFactory.isPostgresURL(configuration.database))
        let descriptors = DescriptorBudget.apply(
            connections: configuration.connectionLimit, metricsConnections: metricsConnections, threads: threads)
        let descriptorLine = DescriptorBudget.message(
            for: descriptors, connections: configuration.connectionLimit, metricsConnections: metricsConnections,
            threads: threads)
        switch descriptors {
        case .refuse:
            say(descriptorLine?.text ?? "", "error")
            return ExitStatus.unavailable
        case .shrink(_, _, let connections):
            configuration.connectionLimit = connections
        case .enough, .raise:
            break
        }

        let start = Result {
            try ServerRunner(configuration: configuration, log: log, interrupted: { lifecycle.isInterrupted })
        }
        let serving = lifecycle.startEnded()
        let runner: ServerRunner
        switch start {
        case .success(let started): runner = started
        case .failure(let error): return startFailure(error, configuration: configuration, say: say)
        }
        guard serving else {
            // The signal came after the start's last step: it stops as after serving nothing.
            runner.stop()
            say("stopped before the server started", "info")
            return ExitStatus.success
        }
        let address = Self.urlHost(runner.server.address)
        // On the same line, so that whoever waits for "listening on" finds the metrics port too.
        let metrics = runner.metricsServer.map { "metrics on http://\(Self.urlHost($0.address)):\($0.port)/metrics" }
        say(
            "listening on http://\(address):\(runner.port) (issuer \(runner.issuer), "
                + "storage \(StorageFactory.isPostgresURL(configuration.database) ? "postgres" : configuration.database), "
                + "enrollment \(configuration.enrollment.rawValue), tokens \(runner.tokenAlgorithm.rawValue)"
                + (configuration.signingKeyFile.map { ", signing key \($0)" } ?? "") + "), "
                + (metrics ?? "metrics off"), "info")
        // After the banner, which is what a reader of the log waits for.
        if let descriptorLine { say(descriptorLine.text, descriptorLine.level) }
        for warning in configuration.startWarnings(credentialsDirectory: ServeFiles.credentialsDirectory) {
            say(warning, "warning")
        }
        if let warning = runner.clockSkewWarning { say(warning, "warning") }
        if configuration.signingKeyFile != nil, runner.tokenAlgorithm != .rs256 {
            say(
                "warning: the signing key file holds a \(runner.tokenAlgorithm.rawValue) key, and "
                    + "OpenID Connect ID tokens need RS256: /authorize answers server_error until the file "
                    + "holds an RSA key", "warning")
        }
        stopRequested.wait()
        say("stopping: finishing requests in progress", "info")
        runner.stop()
        say("stopped", "info")
        return ExitStatus.success
    }

    /// Says why the start failed, and returns the exit status for it.
    private static func startFailure(
        _ error: any Error, configuration: ServerConfiguration, say: (String, String) -> Void
    ) -> Int32 {
        switch error {
        case let interrupted as ServerRunner.StartInterrupted:
            say(interrupted.message, "info")
            return ExitStatus.success
        case let error as StorageError:
            // Named, so that "database disk image is malformed" says which database.
            let database =
                StorageFactory.isPostgresURL(configuration.database)
                ? PostgresStorage.redacted(configuration.database) : configuration.database
            say(error.description.contains(database) ? error.description : "\(database): \(error)", "error")
            return exitStatus(for: error)
        case let error as HTTPServerError:
            say(error.message, "error")
            return ExitStatus.unavailable
        case let error as KeyAuthError where Self.isUnusableKey(error):
            say(error.message, "error")
            return ExitStatus.dataError
        default:
            say("cannot start: \(error)", "error")
            return ExitStatus.failure
        }
    }

    /// A line of serve's own (start, stop, a warning, a failure to start): `keyauth-server:
    /// MESSAGE` as text, or with `--log-format json` an object with `time`, `level` (`info`,
    /// `warning` or `error`) and `message`, the shape of the log's other lines.
    static func lifecycleLine(_ message: String, level: String, format: LogFormat, now: Int64 = ServerClock.now())
        -> String
    {
        guard format == .json else { return "keyauth-server: \(message)" }
        let object: JSONValue = .object([
            "time": .string(RFC3339.string(fromSeconds: now)), "level": .string(level), "message": .string(message),
        ])
        return object.serialized(leadingKeys: ["time", "level", "message"])
    }

    /// The host of `address` as a URL writes it (IPv6 in brackets).
    private static func urlHost(_ address: ListenAddress) -> String {
        address.isIPv6 ? "[\(address.host)]" : address.host
    }
}
