/// The application of the metrics listener (`--metrics-listen`): `/metrics` and `/healthz`,
/// nothing else.
///
/// Metrics tell whoever reads them how many logins fail and succeed, how busy the server is and
/// which endpoints are probed; a monitoring system needs them, the internet does not. So they
/// are served on a listener of their own, loopback by default, and the public listener answers
/// 404 for `/metrics`. `/healthz` is on both: load balancers probe the public one.
public final class OperationsResponder: HTTPResponder {
    private let metrics: ServerMetrics
    private let service: KeyAuthService

    init(metrics: ServerMetrics, service: KeyAuthService) {
        self.metrics = metrics
        self.service = service
    }

    public func respond(to request: HTTPRequest) -> HTTPResponse {
        guard request.path == "/metrics" || request.path == "/healthz" else {
            return HTTPResponse(error: RoutingError.noSuchEndpoint)
        }
        guard request.method == "GET" || request.method == "HEAD" else {
            return HTTPResponse(error: RoutingError.methodNotAllowed(["GET", "HEAD"]))
        }
        if request.path == "/metrics" {
            return .text(metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        do {
            return try health()
        } catch {
            return HTTPResponse(error: error)
        }
    }

    /// The `/healthz` answer: `{"status":"ok"}` when the service's storage answers.
    ///
    /// - Throws: ``StorageError`` when it does not (503 for the caller).
    func health() throws(StorageError) -> HTTPResponse {
        try service.checkHealth()
        return .json(.object(["status": "ok"]))
    }
}
