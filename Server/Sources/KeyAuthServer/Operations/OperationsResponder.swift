import KeyAuth
import Synchronization

/// The application of the metrics listener (`--metrics-listen`): `/metrics` and `/healthz`,
/// nothing else.
///
/// Metrics tell whoever reads them how many logins fail and succeed, how busy the server is and
/// which endpoints are probed; a monitoring system needs them, the internet does not. So they
/// are served on a listener of their own, loopback by default, and the public listener answers
/// 404 for `/metrics`. `/healthz` is on both: load balancers probe the public one.
package final class OperationsResponder: HTTPResponder {
    /// The checks of `/healthz`, by the name its 503 answer gives them.
    enum HealthCheck: String, Sendable {
        /// The database answers a read and is at this server's schema version.
        case storageRead = "storage_read"
        /// The database took a durable write within the last second (``StorageWriteProbe``).
        case storageWrite = "storage_write"
        /// This server's clock is within the leeway of the database's (PostgreSQL), as the last
        /// cleanup read it (``ClockSkewMonitor``).
        case clock
    }

    private let metrics: ServerMetrics
    private let service: KeyAuthService
    private let writeProbe: StorageWriteProbe
    private let log: any ServerLog
    private let logFormat: LogFormat
    /// The check that failed at the last `/healthz`, nil when it answered ok: a change is logged
    /// once, not once per probe.
    private let failing = Mutex<HealthCheck?>(nil)

    init(
        metrics: ServerMetrics, service: KeyAuthService, writeProbe: StorageWriteProbe? = nil,
        log: any ServerLog = SilentLog(), logFormat: LogFormat = .text
    ) {
        self.metrics = metrics
        self.service = service
        self.writeProbe = writeProbe ?? service.makeWriteProbe()
        self.log = log
        self.logFormat = logFormat
    }

    package func respond(to request: HTTPRequest) -> HTTPResponse {
        guard request.path == "/metrics" || request.path == "/healthz" else {
            return HTTPResponse(error: RoutingError.noSuchEndpoint)
        }
        guard request.method == "GET" || request.method == "HEAD" else {
            return HTTPResponse(error: RoutingError.methodNotAllowed(["GET", "HEAD"]))
        }
        if request.path == "/metrics" {
            return .text(metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        return health()
    }

    /// The `/healthz` answer: `{"status":"ok"}` when storage answers a read and takes a write.
    ///
    /// Otherwise 503 `temporarily_unavailable` with `Retry-After`, `"status":"unhealthy"` and the
    /// failing check's name (``HealthCheck``), and no more: the native error goes to the log,
    /// once when the check starts failing.
    func health() -> HTTPResponse {
        var failure: (check: HealthCheck, error: StorageError)?
        do {
            try service.checkHealth()
            if let error = writeProbe.check() {
                failure = (.storageWrite, error)
            } else if let refusal = service.clockSkew.refusal {
                failure = (.clock, StorageError(.unavailable, refusal))
            }
        } catch {
            failure = (.storageRead, error)
        }
        let previous = failing.withLock { failing in
            defer { failing = failure?.check }
            return failing
        }
        if let failure, previous != failure.check {
            log.error("/healthz: \(failure.check.rawValue) failing: \(failure.error)", format: logFormat)
        } else if failure == nil, let previous {
            log.notice("/healthz: \(previous.rawValue) passes again", format: logFormat)
        }
        guard let failure else { return .json(.object(["status": "ok"])) }
        let description =
            failure.check == .clock
            ? "this server's clock is too far from the database's" : HTTPResponse.storageUnavailableDescription
        return .json(
            .object([
                "status": "unhealthy", "check": .string(failure.check.rawValue),
                "error": .string(OAuthError.Code.temporarilyUnavailable.rawValue),
                "error_description": .string(description),
            ]), status: 503, headers: ["Retry-After": "5"])
    }
}
