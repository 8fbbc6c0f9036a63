/// The application of the metrics listener (`--metrics-listen`): `/metrics` and `/healthz`,
/// nothing else.
///
/// Metrics tell whoever reads them how many logins fail and succeed, how busy the server is and
/// which endpoints are probed; a monitoring system needs them, the internet does not. So they
/// are served on a listener of their own, loopback by default, and the public listener answers
/// 404 for `/metrics`. `/healthz` is on both: load balancers probe the public one.
public final class OperationsResponder: HTTPResponder {
    private let metrics: ServerMetrics
    private let storage: any ServerStorage

    init(metrics: ServerMetrics, storage: any ServerStorage) {
        self.metrics = metrics
        self.storage = storage
    }

    public func respond(to request: HTTPRequest) -> HTTPResponse {
        guard request.path == "/metrics" || request.path == "/healthz" else {
            return HTTPResponse(error: ServiceError(.notFound, "no such endpoint"))
        }
        guard request.method == "GET" || request.method == "HEAD" else {
            return HTTPResponse(
                error: ServiceError(.methodNotAllowed(allowed: ["GET", "HEAD"]), "method not allowed on this endpoint"))
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

    /// The `/healthz` answer: `{"status":"ok"}` when storage answers.
    ///
    /// - Throws: ``StorageError`` when it does not (503 for the caller).
    func health() throws(StorageError) -> HTTPResponse {
        try storage.healthCheck()
        return .json(.object(["status": "ok"]))
    }
}
