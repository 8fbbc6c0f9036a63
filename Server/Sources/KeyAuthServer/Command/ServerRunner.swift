import Dispatch
import Glibc
import Synchronization

/// A running server: storage, application, HTTP transport and the periodic cleanup, started
/// together and stopped in the right order.
///
/// Used by `keyauth-server serve` and by tests, which start it on port 0 and read ``port``.
public final class ServerRunner: Sendable {
    /// The HTTP transport.
    public let server: HTTPServer
    /// The metrics listener, unless it is off.
    public let metricsServer: HTTPServer?
    /// The application.
    public let responder: KeyAuthResponder
    /// The store, closed by ``stop()``.
    public let storage: any ServerStorage
    private let cleanup: RepeatingTimer

    /// The bound port.
    public var port: UInt16 { server.port }
    /// The metrics listener's bound port, or nil when it is off.
    public var metricsPort: UInt16? { metricsServer?.port }
    /// The issuer URL (configured, or derived from the bound address).
    public var issuer: String { responder.issuer }

    /// Opens storage, loads or creates the signing key, starts listening (publicly, and for
    /// metrics unless that is off) and schedules cleanup.
    ///
    /// - Parameters:
    ///   - configuration: the settings.
    ///   - storage: an open store; by default the one `configuration.database` names.
    ///   - log: where request and error lines go.
    ///   - now: the clock.
    /// - Throws: ``StorageError``, ``HTTPServerError``, or `KeyAuthError` for the signing key.
    public init(
        configuration: ServerConfiguration, storage: (any ServerStorage)? = nil,
        log: any ServerLog = StandardErrorLog(),
        now: @escaping @Sendable () -> Int64 = ServerClock.now
    ) throws {
        let storage = try storage ?? StorageFactory.open(configuration.database)
        var options = HTTPServerOptions(address: configuration.listen)
        options.threadPoolSize =
            configuration.threads
            ?? HTTPServerOptions.defaultThreadPoolSize(writesBlockUntilDurable: storage.writesBlockUntilDurable)
        options.connectionLimit = configuration.connectionLimit
        options.connectionsPerAddressLimit = configuration.connectionsPerAddressLimit
        options.connectionTimeoutSeconds = configuration.connectionTimeoutSeconds
        options.requestTimeoutSeconds = configuration.requestTimeoutSeconds
        options.maximumBodySize = configuration.maximumBodySize
        do {
            if configuration.issuer != nil || configuration.listen.port != 0 {
                let issuer = configuration.resolvedIssuer(boundPort: configuration.listen.port)
                responder = try KeyAuthResponder(
                    configuration: configuration, issuer: issuer, storage: storage, log: log, now: now)
                server = try HTTPServer(responder: responder, options: options)
            } else {
                // Port 0 without an issuer: the default issuer names the port the kernel picks,
                // so bind first and install the application once it is known (requests that
                // arrive in between get 503).
                let slot = ResponderSlot()
                server = try HTTPServer(responder: slot, options: options)
                responder = try KeyAuthResponder(
                    configuration: configuration, issuer: configuration.resolvedIssuer(boundPort: server.port),
                    storage: storage, log: log, now: now)
                slot.install(responder)
            }
        } catch {
            storage.close()
            throw error
        }
        if let metricsAddress = configuration.metricsAddress {
            // A few threads and connections: one scraper and an operator's curl.
            var metricsOptions = HTTPServerOptions(address: metricsAddress)
            metricsOptions.threadPoolSize = 2
            metricsOptions.connectionLimit = 64
            do {
                metricsServer = try HTTPServer(responder: responder.operations, options: metricsOptions)
            } catch {
                server.stop()
                storage.close()
                throw HTTPServerError(message: "\(error.message) for metrics; pass --metrics-listen HOST:PORT or off")
            }
        } else {
            metricsServer = nil
        }
        self.storage = storage
        let responder = self.responder
        responder.purgeExpired()
        cleanup = RepeatingTimer(intervalSeconds: configuration.cleanupIntervalSeconds) { responder.purgeExpired() }
    }

    /// Stops accepting connections, finishes requests in progress, stops the cleanup and closes
    /// storage. Idempotent.
    public func stop() {
        server.stop()
        metricsServer?.stop()
        cleanup.cancel()
        storage.close()
    }
}

/// Forwards to the application once installed; answers 503 before.
private final class ResponderSlot: HTTPResponder {
    private let responder = Mutex<(any HTTPResponder)?>(nil)

    func install(_ responder: any HTTPResponder) {
        self.responder.withLock { $0 = responder }
    }

    func respond(to request: HTTPRequest) -> HTTPResponse {
        guard let installed = responder.withLock({ $0 }) else {
            return HTTPResponse(error: StorageError(.unavailable, "starting"))
        }
        return installed.respond(to: request)
    }
}
