import KeyAuth

/// The HTTP face of the server: routes requests to the service under the attempt limits and
/// turns results and errors into responses; also counts metrics (served by ``operations`` on
/// the metrics listener) and writes the request log.
///
/// Plain Swift with no socket in sight, so every rule of PROTOCOL.md is testable by calling
/// ``respond(to:)`` with ``HTTPRequest`` values. Its collaborators are built by the composition
/// root, ``ServerRunner``, and handed in.
public final class KeyAuthResponder: HTTPResponder {
    /// What the responder works with, built by the composition root
    /// (``ServerRunner/compose(configuration:issuer:storage:log:now:)``).
    struct Collaborators: Sendable {
        let service: KeyAuthService
        let signingKeys: ServerSigningKeys
        let limits: AttemptLimits
        let metrics: ServerMetrics
        let log: any ServerLog
        /// Whether the last `X-Forwarded-For` hop is the client address (`--trust-proxy`).
        let trustProxy: Bool
        let logRequests: Bool
        /// Text or JSON lines (`--log-format`).
        let logFormat: LogFormat
        let maximumBodySize: Int
    }

    let service: KeyAuthService
    let signingKeys: ServerSigningKeys
    let limits: AttemptLimits
    let metrics: ServerMetrics
    /// The metrics listener's application, sharing this one's metrics and service.
    public let operations: OperationsResponder
    let log: any ServerLog
    let trustProxy: Bool
    let logRequests: Bool
    let logFormat: LogFormat
    let maximumBodySize: Int
    /// The issuer URL all tokens name.
    public let issuer: String

    /// The responder over collaborators already built.
    init(_ collaborators: Collaborators) {
        service = collaborators.service
        signingKeys = collaborators.signingKeys
        limits = collaborators.limits
        metrics = collaborators.metrics
        operations = OperationsResponder(metrics: collaborators.metrics, service: collaborators.service)
        log = collaborators.log
        trustProxy = collaborators.trustProxy
        logRequests = collaborators.logRequests
        logFormat = collaborators.logFormat
        maximumBodySize = collaborators.maximumBodySize
        issuer = collaborators.service.settings.issuer
    }

    /// The application on `storage`, composed as ``ServerRunner`` composes it: for tests and
    /// tools that answer requests without a listener.
    ///
    /// - Throws: ``StorageError``, or `KeyAuthError` when the signing key cannot be created or
    ///   read.
    public convenience init(
        configuration: ServerConfiguration, issuer: String, storage: any ServerStorage,
        log: any ServerLog = StandardErrorLog(), now: @escaping @Sendable () -> Int64 = ServerClock.now
    ) throws {
        self.init(
            try ServerRunner.compose(configuration: configuration, issuer: issuer, storage: storage, log: log, now: now)
        )
    }

    public func respond(to request: HTTPRequest) -> HTTPResponse {
        let start = ServerClock.monotonicNanoseconds()
        let route = Route(path: request.path)
        var response: HTTPResponse
        var caller = Caller()
        var errorCode: String?
        do {
            response = try dispatch(request, route: route, caller: &caller)
        } catch {
            if !(error is ServiceError || error is RoutingError) {
                log.error("\(request.method) \(route?.label ?? "unknown path"): \(error)", format: logFormat)
            }
            response = HTTPResponse(error: error)
            errorCode = HTTPResponse.statusAndCode(for: error).code.rawValue
        }
        let seconds = Double(ServerClock.monotonicNanoseconds() - start) / 1e9
        metrics.recordRequest(
            route: route?.label ?? "unknown", method: Self.methodLabel(request.method), status: response.status,
            seconds: seconds)
        if logRequests {
            // Unknown paths are cut short: a confused client may put anything in a path.
            let path = route == nil ? String(request.path.prefix(64)) : request.path
            log.request(
                RequestLogEntry(
                    client: clientAddress(of: request), method: request.method, path: path,
                    route: route?.label ?? "unknown", status: response.status, error: errorCode, user: caller.user,
                    deviceKID: caller.deviceKID, milliseconds: seconds * 1000),
                format: logFormat)
        }
        return response
    }

    /// Periodic housekeeping: forgets rate-limit counters, and through the service expired
    /// replay-cache entries, enrollment codes, and pending and denied devices past their
    /// retention.
    public func purgeExpired() {
        limits.purge()
        do {
            try service.purgeExpired()
        } catch {
            log.error("cleanup failed: \(error)", format: logFormat)
        }
    }

    // MARK: Dispatch

    /// Who a request turned out to be, for its log line: set once the server has established it
    /// (a verified login, a registration it accepted, a valid access token), never from what a
    /// client merely claims.
    struct Caller {
        var user: String?
        var deviceKID: String?

        mutating func identify(_ device: DeviceRecord) {
            user = device.user
            deviceKID = device.kid
        }
    }

    private func dispatch(_ request: HTTPRequest, route: Route?, caller: inout Caller) throws -> HTTPResponse {
        // The transport enforces the limit while reading; this check keeps the rule true for
        // any other caller of the responder.
        if request.bodyTooLarge || request.body.count > maximumBodySize {
            throw RoutingError(.payloadTooLarge, "the request body is larger than \(maximumBodySize / 1024) KiB")
        }
        guard let route else { throw RoutingError.noSuchEndpoint }
        guard route.allowedMethods.contains(request.method) else {
            throw RoutingError.methodNotAllowed(route.allowedMethods)
        }
        switch (route, request.method) {
        case (.token, _):
            return try limits.run(from: clientKey(request), countsEveryAttempt: false, record: metrics.recordLogin) {
                let result = try service.login(assertion: try request.jwtBearerAssertion())
                caller.user = result.user
                caller.deviceKID = result.deviceKID
                return (Self.tokenResponse(result), "success")
            }
        case (.devices, "POST"):
            return try limits.run(
                from: clientKey(request), countsEveryAttempt: true, record: metrics.recordRegistration
            ) {
                let registration = try request.registrationRequest()
                let outcome = try service.register(registration, from: clientAddress(of: request))
                caller.identify(outcome.device)
                return registrationResponse(outcome)
            }
        case (.devices, _):
            let actor = try service.authenticate(bearer: try request.bearerToken())
            caller.identify(actor)
            let query = try request.deviceListQuery()
            let page = try service.listDevices(of: actor, after: query.position, limit: query.limit)
            return .json(deviceListPage(page.devices, next: page.next).jsonValue)
        case (.device(let kid), _):
            let actor = try service.authenticate(bearer: try request.bearerToken())
            caller.identify(actor)
            try service.revoke(kid: kid, by: actor)
            return HTTPResponse(status: 204, headers: ["Cache-Control": "no-store"])
        case (.approveDevice(let kid), _):
            let actor = try service.authenticate(bearer: try request.bearerToken())
            caller.identify(actor)
            return .json(approvalEntry(try service.approve(kid: kid, by: actor)))
        case (.jwks, _):
            return .json(signingKeys.jwks, headers: ["Cache-Control": "public, max-age=300"])
        case (.openIDConfiguration, _):
            return .json(
                ServerMetadata(keyAuthServerAt: issuer).jsonValue, headers: ["Cache-Control": "public, max-age=300"])
        case (.health, _):
            return try operations.health()
        }
    }

    /// The address the rate limit counts: the peer, or behind a trusted proxy the last
    /// `X-Forwarded-For` hop (the one the proxy itself added; earlier hops are client-chosen).
    func clientAddress(of request: HTTPRequest) -> String {
        guard trustProxy, let header = request.headers.values(for: "X-Forwarded-For").last,
            let last = header.split(separator: ",").last?.trimmingWhitespace(), RateLimitKey(parsing: last) != nil
        else { return request.clientAddress }
        return last
    }

    private func clientKey(_ request: HTTPRequest) -> RateLimitKey {
        RateLimitKey(address: clientAddress(of: request))
    }

    /// Methods outside the known set share one label, so clients cannot grow the metrics.
    private static func methodLabel(_ method: String) -> String {
        ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"].contains(method) ? method : "OTHER"
    }
}
