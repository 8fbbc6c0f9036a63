import Synchronization

extension ServerRunner {
    /// The public listener and the metrics listener, bound before the database is opened and
    /// answering 503 until ``install(_:)`` gives them the application.
    struct Listeners {
        /// The metrics listener's connections (and 2 threads): one scraper and an operator's curl.
        static let metricsConnectionLimit = 64
        let server: HTTPServer
        let metrics: HTTPServer?
        private let application = ResponderSlot()
        private let operations = ResponderSlot()

        /// Binds `configuration`'s addresses.
        ///
        /// - Parameter writesBlockUntilDurable: whether the storage's writes hold their thread
        ///   (PostgreSQL), which decides the default number of worker threads.
        /// - Throws: ``HTTPServerError``; one for the metrics listener names `--metrics-listen`.
        init(_ configuration: ServerConfiguration, writesBlockUntilDurable: Bool) throws(HTTPServerError) {
            var options = HTTPServerOptions(address: configuration.listen)
            options.threadPoolSize = configuration.workerThreads(writesBlockUntilDurable: writesBlockUntilDurable)
            options.connectionLimit = configuration.connectionLimit
            options.connectionsPerAddressLimit = configuration.connectionsPerAddressLimit
            options.connectionTimeoutSeconds = configuration.connectionTimeoutSeconds
            options.requestTimeoutSeconds = configuration.requestTimeoutSeconds
            options.maximumBodySize = configuration.maximumBodySize
            server = try HTTPServer(responder: application, options: options)
            guard let metricsAddress = configuration.metricsAddress else {
                metrics = nil
                return
            }
            var metricsOptions = HTTPServerOptions(address: metricsAddress)
            metricsOptions.threadPoolSize = 2
            metricsOptions.connectionLimit = Self.metricsConnectionLimit
            do {
                metrics = try HTTPServer(responder: operations, options: metricsOptions)
            } catch {
                server.stop()
                var error = error
                error.flag = "--metrics-listen"
                error.purpose = "metrics"
                throw error
            }
        }

        /// Hands both listeners their responders: `responder` and its operations endpoints.
        func install(_ responder: KeyAuthResponder) {
            application.install(responder)
            operations.install(responder.operations)
        }

        /// Stops both.
        func stop() {
            server.stop()
            metrics?.stop()
        }
    }

    /// What a start has set up so far, and how to take it down when a later step fails.
    struct StartUndo {
        let listeners: Listeners
        /// The store, once open (or given).
        var storage: (any ServerStorage)?
        /// The SQLite file's lock, whose file is removed when this start created it.
        var lock: SQLiteServeLock?
        /// The replay cache, once started: saved as at a clean stop, so that an existing
        /// database is not left marked as after a crash by a start that served nothing.
        var replay: ReplayGuard?

        /// Stops the listeners, saves the replay cache, closes the store, and removes the
        /// database file this start created (after closing, so that SQLite has let go of it).
        ///
        /// - Returns: whether it removed a database file.
        @discardableResult
        func run(now: Int64) -> Bool {
            listeners.stop()
            if let replay, let storage { try? replay.stop(storage: storage, now: now) }
            storage?.close()
            return lock?.removeCreatedDatabase() ?? false
        }
    }

    /// A start that a stop signal interrupted between two of its steps, after undoing them as a
    /// failed start does (``StartUndo``): a closed internal outcome, not a fault, so `serve`
    /// exits 0 as for any stop.
    struct StartInterrupted: Error, Sendable {
        /// The SQLite file this start had created and removed again, if any.
        var removedDatabase: String?

        /// What `serve` says: the line of a stop before the start, and what became of the
        /// database the start made.
        var message: String {
            "stopped before the server started"
                + (removedDatabase.map { "; removed the database \($0) that this start had created" } ?? "")
        }
    }

    /// Throws ``StartInterrupted`` when a stop signal came during the start.
    static func stopIfInterrupted(_ interrupted: @Sendable () -> Bool) throws(StartInterrupted) {
        if interrupted() { throw StartInterrupted() }
    }
}

/// Forwards to the application once installed; answers 503 before.
///
/// The application is read with one atomic load, without a lock that every request of every
/// worker thread would take.
private final class ResponderSlot: HTTPResponder {
    private final class Installed: Sendable {
        let responder: any HTTPResponder
        init(_ responder: any HTTPResponder) { self.responder = responder }
    }
    private let installed = AtomicLazyReference<Installed>()

    func install(_ responder: any HTTPResponder) {
        _ = installed.storeIfNil(Installed(responder))
    }

    func respond(to request: HTTPRequest) -> HTTPResponse {
        guard let responder = installed.load()?.responder else {
            return HTTPResponse(error: StorageError(.unavailable, "starting"))
        }
        return responder.respond(to: request)
    }

    func failure(_ error: any Error, at path: String) -> HTTPResponse {
        installed.load()?.responder.failure(error, at: path) ?? HTTPResponse(error: error)
    }
}

/// Renews a memory replay cache's lease every second
/// (``ReplayGuard/renewLease(storage:now:onlyIfLapsed:)``), so that logins find it ahead and write
/// nothing; logs when renewals start failing (logins then wait for the write, or get 503) and when
/// they succeed again.
final class ReplayLeaseRenewal: Sendable {
    private let replay: ReplayGuard
    private let storage: any ServerStorage
    private let now: @Sendable () -> Int64
    private let report: @Sendable (String) -> Void
    private let failing = Atomic(false)
    private let timer = Mutex<RepeatingTimer?>(nil)

    init(
        replay: ReplayGuard, storage: any ServerStorage, now: @escaping @Sendable () -> Int64,
        report: @escaping @Sendable (String) -> Void
    ) {
        self.replay = replay
        self.storage = storage
        self.now = now
        self.report = report
    }

    /// Starts the timer (memory mode only).
    func start() {
        guard replay.mode == .memory else { return }
        let timer = RepeatingTimer(intervalSeconds: 1, leewayMilliseconds: 100) { [weak self] in self?.renew() }
        self.timer.withLock { $0 = timer }
    }

    /// One renewal; a failure is logged when renewals start failing, not at every one.
    func renew() {
        do {
            try replay.renewLease(storage: storage, now: now())
            if failing.exchange(false, ordering: .relaxed) { report("the replay cache's lease is renewed again") }
        } catch {
            guard !failing.exchange(true, ordering: .relaxed) else { return }
            report(
                "the replay cache's lease cannot be renewed (\(error.message)); logins wait for the write, or get 503 "
                    + "while it fails")
        }
    }

    /// Stops the timer; the replay cache's stop then writes the snapshot that ends the lease.
    func cancel() {
        timer.withLock { timer in
            timer?.cancel()
            timer = nil
        }
    }
}
