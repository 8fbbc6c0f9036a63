import KeyAuth

/// The HTTP face of the server: routes requests to the service under the attempt limits and
/// turns results and errors into responses; also counts metrics (served by ``operations`` on
/// the metrics listener) and writes the request log.
///
/// Plain Swift with no socket in sight, so every rule of PROTOCOL.md is testable by calling
/// ``respond(to:)`` with ``HTTPRequest`` values. Its collaborators are built by the composition
/// root, ``ServerRunner``, and handed in.
package final class KeyAuthResponder: HTTPResponder {
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
        /// The SSH user certificate authority, on a server with `--ssh-ca-key-file`.
        var sshCertificates: SSHCertificateIssuer? = nil
    }

    let service: KeyAuthService
    let signingKeys: ServerSigningKeys
    let limits: AttemptLimits
    let metrics: ServerMetrics
    /// The metrics listener's application, sharing this one's metrics and service.
    package let operations: OperationsResponder
    let log: any ServerLog
    let trustProxy: Bool
    let logRequests: Bool
    let logFormat: LogFormat
    let maximumBodySize: Int
    /// The account page at `/account`.
    let account: AccountPage
    /// The OpenID Connect authorization endpoint at `/authorize`, signing in through ``account``.
    let authorization: AuthorizationEndpoint
    /// RP-Initiated Logout at `/end-session`.
    let endSession: EndSessionEndpoint
    /// The OpenID Connect UserInfo endpoint at `/userinfo`.
    let userInfo: UserInfoEndpoint
    /// `/oauth/token` and its grants.
    let tokenEndpoint: TokenEndpoint
    /// The issuer URL all tokens name.
    package let issuer: String
    /// The SSH user certificate authority, if the server is one.
    let sshCertificates: SSHCertificateIssuer?

    /// The responder over collaborators already built.
    init(_ collaborators: Collaborators) {
        service = collaborators.service
        signingKeys = collaborators.signingKeys
        limits = collaborators.limits
        metrics = collaborators.metrics
        operations = OperationsResponder(
            metrics: collaborators.metrics, service: collaborators.service, log: collaborators.log,
            logFormat: collaborators.logFormat)
        log = collaborators.log
        trustProxy = collaborators.trustProxy
        logRequests = collaborators.logRequests
        logFormat = collaborators.logFormat
        maximumBodySize = collaborators.maximumBodySize
        issuer = collaborators.service.settings.issuer
        sshCertificates = collaborators.sshCertificates
        let signIn = BrowserSignIn(
            browser: BrowserRequests(
                issuer: collaborators.service.settings.issuer, trustProxy: collaborators.trustProxy),
            sessions: BrowserSessions(service: collaborators.service), limits: collaborators.limits,
            metrics: collaborators.metrics)
        account = AccountPage(service: collaborators.service, signIn: signIn)
        authorization = AuthorizationEndpoint(
            provider: collaborators.service.openID, metrics: collaborators.metrics, signIn: signIn)
        endSession = EndSessionEndpoint(provider: collaborators.service.openID, signIn: signIn)
        userInfo = UserInfoEndpoint(provider: collaborators.service.openID)
        tokenEndpoint = TokenEndpoint(
            service: collaborators.service, limits: collaborators.limits, metrics: collaborators.metrics)
    }

    /// The application on `storage`, composed as ``ServerRunner`` composes it: for tests and
    /// tools that answer requests without a listener.
    ///
    /// - Throws: ``StorageError``, or `KeyAuthError` when the signing key cannot be created or
    ///   read.
    package convenience init(
        configuration: ServerConfiguration, issuer: String, storage: any ServerStorage,
        log: any ServerLog = StandardErrorLog(), now: @escaping @Sendable () -> Int64 = ServerClock.now
    ) throws {
        self.init(
            try ServerRunner.compose(configuration: configuration, issuer: issuer, storage: storage, log: log, now: now)
        )
    }

    /// An error's answer; under `/account` with the page's security headers, which section 9
    /// promises for every response there (an unknown path, a body too large, a failed write):
    /// a framed or sniffed error is still the page's origin.
    package func failure(_ error: any Error, at path: String) -> HTTPResponse {
        var response = HTTPResponse(error: error)
        if path == "/account" || path.hasPrefix("/account/") {
            BrowserRequests.addSecurityHeaders(&response.headers)
        }
        return response
    }

    package func respond(to request: HTTPRequest) -> HTTPResponse {
        let start = ServerClock.monotonicNanoseconds()
        let route = Self.routes.match(method: request.method, path: request.path)
        let label = Self.label(of: route)
        var response: HTTPResponse
        var caller = Caller()
        var errorCode: String?
        do {
            response = try dispatch(request, route: route, caller: &caller)
        } catch {
            if !(error is ServiceError || error is RoutingError) {
                log.error("\(request.method) \(label ?? "unknown path"): \(error)", format: logFormat)
            }
            response = failure(error, at: request.path)
            errorCode = HTTPResponse.statusAndCode(for: error).code.rawValue
        }
        // Under the transport's durability scope, the answer waits for the writes it depends on,
        // and becomes a 503 when they fail (a full disk): it is counted and logged once that is
        // known, as the client gets it.
        let scope = DurabilityScope.current
        let identified = caller
        // The closures keep what the line and the metrics need, not a copy of the whole request.
        let logged = LoggedRequest(
            method: request.method, path: request.path,
            client: logRequests ? clientAddress(of: request) : "")
        guard let deferred = response.deferred else {
            let answer = (status: response.status, code: errorCode ?? Self.errorCode(of: response))
            // Most answers depend on no write (a login's are kept in memory or written later):
            // recorded at once, without a closure that copies what the line needs.
            guard let scope, scope.hasNotedWrites else {
                record(logged, label: label, caller: identified, answer: answer, nil, since: start)
                return response
            }
            scope.whenDurable { [self] failure in
                record(logged, label: label, caller: identified, answer: answer, failure, since: start)
            }
            return response
        }
        // A long poll: counted and logged once its answer comes, with the whole wait.
        let answered = DeferredResponse()
        deferred.whenComplete { [self] final in
            Self.whenSettled(scope) { [self] failure in
                record(
                    logged, label: label, caller: identified, answer: (final.status, Self.errorCode(of: final)),
                    failure, since: start)
            }
            answered.complete(with: final)
        }
        return .deferred(answered)
    }

    /// What a request's log line and metrics take from it, once it is answered.
    private struct LoggedRequest: Sendable {
        let method: String
        let path: String
        /// The client address as the log shows it (empty when requests are not logged).
        let client: String
    }

    /// The metrics label of a matched route: its declared pattern; nil for an unknown path.
    static func label(of route: RouteTable<Endpoint>.Match) -> String? {
        switch route {
        case .found(let declaration, _): declaration.label
        case .methodNotAllowed(_, let label): label
        case .notFound: nil
        }
    }

    /// Calls `body` once the writes of `scope` are durable (with nil) or failed (with the
    /// error), at once without a scope.
    private static func whenSettled(
        _ scope: DurabilityScope?, _ body: @escaping @Sendable (StorageError?) -> Void
    ) {
        guard let scope else { return body(nil) }
        scope.whenDurable(body)
    }

    /// Records `answer` (status and OAuth error code), or the transport's 503 when a write it
    /// depended on failed.
    private func record(
        _ request: LoggedRequest, label: String?, caller: Caller, answer: (status: Int, code: String?),
        _ failure: StorageError?, since start: UInt64
    ) {
        guard let failure else {
            record(request, label: label, caller: caller, status: answer.status, error: answer.code, since: start)
            return
        }
        // As a failure thrown while answering is: the operator needs the cause (a full disk),
        // which the client's 503 does not carry.
        log.error("\(request.method) \(label ?? "unknown path"): \(failure)", format: logFormat)
        let (status, code) = HTTPResponse.statusAndCode(for: failure)
        record(request, label: label, caller: caller, status: status, error: code.rawValue, since: start)
    }

    /// The OAuth error code of an error response built without throwing (`/healthz`'s 503,
    /// UserInfo's `insufficient_scope`, a long poll's end), for the log.
    private static func errorCode(of response: HTTPResponse) -> String? {
        guard response.status >= 400 else { return nil }
        return (try? JSONValue(parsing: response.body))?["error"]?.stringValue
    }

    /// Counts a request in the metrics and writes its log line.
    private func record(
        _ request: LoggedRequest, label: String?, caller: Caller, status: Int, error errorCode: String?,
        since start: UInt64
    ) {
        let seconds = Double(ServerClock.nanoseconds(from: start, to: ServerClock.monotonicNanoseconds())) / 1e9
        metrics.recordRequest(
            route: label ?? "unknown", method: HTTPMethod.label(of: request.method), status: status, seconds: seconds
        )
        if logRequests {
            // Unknown paths are cut short: a confused client may put anything in a path. A sign-in
            // request's id is its client's auth_req_id, half of what redeems it: its pattern.
            let path =
                switch label {
                case nil: String(request.path.prefix(64))
                case let pattern? where pattern.hasPrefix("/v1/auth-requests/{id}"): pattern
                default: request.path
                }
            log.request(
                RequestLogEntry(
                    client: request.client, method: request.method, path: path,
                    route: label ?? "unknown", status: status, error: errorCode, user: caller.user,
                    deviceKID: caller.deviceKID, clientID: caller.clientID, milliseconds: seconds * 1000),
                format: logFormat)
        }
    }

    /// The response `body` makes, or its error as a response (logged when unexpected).
    static func response(_ body: () throws -> HTTPResponse) -> HTTPResponse {
        do {
            return try body()
        } catch {
            return HTTPResponse(error: error)
        }
    }

    /// Periodic housekeeping: forgets rate-limit counters, and through the service expired
    /// replay-cache entries, enrollment codes, and pending and denied devices past their
    /// retention; compares the clock with the database's again (``ClockSkewMonitor``); reads the
    /// SSH CA and principals files again (a rotation, a retirement, an edit); and returns the
    /// memory freed since to the kernel (``FreedMemory``).
    package func purgeExpired() {
        defer { FreedMemory.returnToSystem() }
        limits.purge()
        // The clock first: the purge goes by the database's time as this reading finds it.
        checkClock(afterStep: false)
        do {
            try service.purgeExpired()
        } catch {
            log.error("cleanup failed: \(error)", format: logFormat)
        }
        do {
            try sshCertificates?.reloadFiles()
        } catch {
            log.error(
                "cleanup: an SSH CA or principals file could not be read again; still using what was read before: "
                    + error.message, format: logFormat)
        }
    }

    // MARK: Dispatch

    /// Who a request turned out to be, for its log line: set once the server has established it
    /// (a verified login, a registration it accepted, a valid access token, an authenticated
    /// client, a `client_id` found registered), never from what a client merely claims.
    struct Caller {
        var user: String?
        var deviceKID: String?
        /// The OAuth client the request was made by or for.
        var clientID: String?

        mutating func identify(_ device: DeviceRecord) {
            user = device.user
            deviceKID = device.kid
        }

        /// The user of a signed-in browser session, and the device that approved its sign-in.
        mutating func identify(_ session: BrowserSessionRecord) {
            guard session.isSignedIn else { return }
            user = session.user
            deviceKID = session.approvingKID
        }
    }

    /// The route's answer, after the checks every route shares: body size, 404 and 405, and a
    /// repeated query parameter.
    private func dispatch(_ request: HTTPRequest, route: RouteTable<Endpoint>.Match, caller: inout Caller) throws
        -> HTTPResponse
    {
        // The transport answers this before reading the body, and closes the connection after.
        if let problem = request.framingProblem { throw ServiceError(.invalidRequest, problem) }
        if let fault = request.pathFault { throw ServiceError(.invalidRequest, "the path holds \(fault)") }
        // The transport enforces the limit while reading; this check keeps the rule true for
        // any other caller of the responder.
        if request.bodyTooLarge || request.body.count > maximumBodySize {
            throw RoutingError(.payloadTooLarge, "the request body is larger than \(maximumBodySize / 1024) KiB")
        }
        let endpoint: Endpoint
        let parameters: RouteParameters
        switch route {
        case .notFound: throw RoutingError.noSuchEndpoint
        case .methodNotAllowed(let allowed, _): throw RoutingError.methodNotAllowed(allowed.map(\.rawValue))
        case .found(let declaration, let values): (endpoint, parameters) = (declaration.handler, values)
        }
        if service.clockSkew.refusesRequests(), !Self.servedWithClockOff(route) {
            // Every other answer judges a token, a code or an expiry by this host's clock, which
            // the last comparison found past the leeway, or which was set since: a clock behind
            // accepts what instances on time call expired, one ahead refuses good tokens.
            throw ServiceError(
                .busy(retryAfter: Int(ClockSkewCheck.refusalBound)), Self.clockRefusal(service.clockSkew))
        }
        if request.queryHoldsNUL || request.queryIsNotUTF8 {
            let fault = request.queryHoldsNUL ? "a NUL character (%00)" : "bytes that are not UTF-8"
            switch endpoint.repeatedQuery {
            case .refused: throw ServiceError(.invalidRequest, "the query holds \(fault)")
            case .refusedAsPage, .endpointDecides:
                // No redirect: which of the parameters held it, the redirect URI included, is unknown.
                return account.browser.refused("The address holds \(fault).", title: "Request refused", status: 400)
            }
        }
        if let name = request.repeatedQueryNames.min() {
            switch endpoint.repeatedQuery {
            case .endpointDecides: break
            case .refusedAsPage:
                return account.browser.refused(
                    "The address repeats a parameter.", title: "Request refused", status: 400)
            case .refused: throw ServiceError(.invalidRequest, FormURLEncoding.repeatedParameterMessage(name))
            }
        }
        return try endpoint.respond(self, request, parameters, &caller)
    }

    /// The device acting through a resource request's access token (and DPoP proof).
    func authenticate(_ request: HTTPRequest) throws -> DeviceRecord {
        try service.authenticate(
            authorization: try request.authorization(), proof: try request.dpopProof(atResource: true),
            method: request.method, path: request.path)
    }

    /// The device acting through a resource request's access token, which the request's log
    /// line then names.
    func authenticate(_ request: HTTPRequest, identifying caller: inout Caller) throws -> DeviceRecord {
        let actor = try authenticate(request)
        caller.identify(actor)
        return actor
    }

    /// The address the rate limit counts: the peer, or behind a trusted proxy the last
    /// `X-Forwarded-For` hop (the one the proxy itself added; earlier hops are client-chosen).
    func clientAddress(of request: HTTPRequest) -> String {
        request.clientAddress(trustingProxy: trustProxy)
    }

    /// The key the attempt limits count a request under: its client address.
    func clientKey(_ request: HTTPRequest) -> RateLimitKey {
        RateLimitKey(address: clientAddress(of: request))
    }
}
