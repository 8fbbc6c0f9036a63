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

    package func respond(to request: HTTPRequest) -> HTTPResponse {
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
        // Under the transport's durability scope, the answer waits for the writes it depends on,
        // and becomes a 503 when they fail (a full disk): it is counted and logged once that is
        // known, as the client gets it.
        let scope = DurabilityScope.current
        let identified = caller
        guard let deferred = response.deferred else {
            let answer = (status: response.status, code: errorCode ?? Self.errorCode(of: response))
            Self.whenSettled(scope) { [self] failure in
                record(request, route: route, caller: identified, answer: answer, failure, since: start)
            }
            return response
        }
        // A long poll: counted and logged once its answer comes, with the whole wait.
        let answered = DeferredResponse()
        deferred.whenComplete { [self] final in
            Self.whenSettled(scope) { [self] failure in
                record(
                    request, route: route, caller: identified, answer: (final.status, Self.errorCode(of: final)),
                    failure, since: start)
            }
            answered.complete(with: final)
        }
        return .deferred(answered)
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
        _ request: HTTPRequest, route: Route?, caller: Caller, answer: (status: Int, code: String?),
        _ failure: StorageError?, since start: UInt64
    ) {
        guard let failure else {
            record(request, route: route, caller: caller, status: answer.status, error: answer.code, since: start)
            return
        }
        let (status, code) = HTTPResponse.statusAndCode(for: failure)
        record(request, route: route, caller: caller, status: status, error: code.rawValue, since: start)
    }

    /// The OAuth error code of an error response built without throwing (`/healthz`'s 503,
    /// UserInfo's `insufficient_scope`, a long poll's end), for the log.
    private static func errorCode(of response: HTTPResponse) -> String? {
        guard response.status >= 400 else { return nil }
        return (try? JSONValue(parsing: response.body))?["error"]?.stringValue
    }

    /// Counts a request in the metrics and writes its log line.
    private func record(
        _ request: HTTPRequest, route: Route?, caller: Caller, status: Int, error errorCode: String?,
        since start: UInt64
    ) {
        let seconds = Double(ServerClock.nanoseconds(from: start, to: ServerClock.monotonicNanoseconds())) / 1e9
        metrics.recordRequest(
            route: route?.label ?? "unknown", method: Self.methodLabel(request.method), status: status, seconds: seconds
        )
        if logRequests {
            // Unknown paths are cut short: a confused client may put anything in a path.
            let path = route == nil ? String(request.path.prefix(64)) : request.path
            log.request(
                RequestLogEntry(
                    client: clientAddress(of: request), method: request.method, path: path,
                    route: route?.label ?? "unknown", status: status, error: errorCode, user: caller.user,
                    deviceKID: caller.deviceKID, clientID: caller.clientID, milliseconds: seconds * 1000),
                format: logFormat)
        }
    }

    /// The response `body` makes, or its error as a response (logged when unexpected).
    private static func response(_ body: () throws -> HTTPResponse) -> HTTPResponse {
        do {
            return try body()
        } catch {
            return HTTPResponse(error: error)
        }
    }

    /// Periodic housekeeping: forgets rate-limit counters, and through the service expired
    /// replay-cache entries, enrollment codes, and pending and denied devices past their
    /// retention.
    package func purgeExpired() {
        limits.purge()
        do {
            try service.purgeExpired()
        } catch {
            log.error("cleanup failed: \(error)", format: logFormat)
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
        if let name = request.repeatedQueryNames.min() {
            // RFC 6749 section 3.1 at every endpoint, before any reads the query: which of two
            // values counts is exactly what a request smuggling a second one wants to choose.
            switch route {
            case .authorize, .endSession:
                break  // their own pages, or a redirect to a client they validated
            case .account:
                return account.browser.refused(
                    "The address repeats a parameter.", title: "Request refused", status: 400)
            default:
                throw ServiceError(.invalidRequest, FormURLEncoding.repeatedParameterMessage(name))
            }
        }
        switch (route, request.method) {
        case (.token, _):
            return try tokenEndpoint.respond(to: request, from: clientKey(request), caller: &caller)
        case (.backchannelAuthorize, _):
            return try limits.run(
                from: clientKey(request), everyAttempt: nil, record: metrics.recordSignInRequest
            ) {
                let form = try request.formBody()
                let client = try service.clients.authenticate(try request.clientCredentials(form: form))
                caller.clientID = client.id
                if OpenIDProvider.asksForOpenID(form["scope"]) && !service.openID.canSignIDTokens {
                    throw ServiceError(.invalidRequest, "scope openid needs an ID token; this server has no RS256 key")
                }
                let started = try service.signIn.start(
                    kind: .backchannel, clientID: client.id, user: try Self.loginHint(form),
                    bindingMessage: form["binding_message"], scope: form["scope"],
                    requestedExpiry: form["requested_expiry"], from: clientAddress(of: request))
                // A user with a device that can approve: the request was made for them.
                caller.user = started.user
                return (Self.backchannelResponse(started, now: service.now()), "created")
            }
        case (.signInRequests, _):
            let actor = try authenticate(request)
            caller.identify(actor)
            let query = try request.signInRequestQuery()
            let later = DeferredResponse()
            let watch = try service.signIn.open(for: actor.user, after: query.after, waiting: query.wait) {
                [self] result in
                later.complete(
                    with: Self.response {
                        .json(try signInRequestList(try result.get(), after: query.after).jsonValue)
                    })
            }
            switch watch {
            case .now(let requests): return .json(try signInRequestList(requests, after: query.after).jsonValue)
            case .later: return .deferred(later)
            }
        case (.signInRequestCode(let id), _):
            let actor = try authenticate(request)
            caller.identify(actor)
            let checked = try service.checkSignInCode(id: id, code: try request.signInCode(), by: actor)
            return .json(
                .object(["id": .string(checked.id), "status": .string(checked.status.rawValue), "code": "matches"]))
        case (.signInRequest(let id), _):
            let actor = try authenticate(request)
            let answer = try request.signInAnswer()
            let answered = try service.answerSignInRequest(
                id: id, decision: answer.decision, assertion: answer.assertion, by: actor)
            metrics.recordSignInRequest(result: answered.status.rawValue)
            return .json(.object(["id": .string(answered.id), "status": .string(answered.status.rawValue)]))
        case (.account(let path), _):
            return try account.respond(to: request, path: path)
        case (.authorize(let path), _):
            return try authorization.respond(to: request, path: path, caller: &caller)
        case (.endSession, _):
            return try endSession.respond(to: request, caller: &caller)
        case (.userInfo, _):
            return try userInfo.respond(to: request, caller: &caller)
        case (.devices, "POST"):
            return try limits.run(
                from: clientKey(request), everyAttempt: .registrations, record: metrics.recordRegistration
            ) {
                let registration = try request.registrationRequest()
                let outcome = try service.register(registration, from: clientAddress(of: request))
                caller.identify(outcome.device)
                return registrationResponse(outcome)
            }
        case (.devices, _):
            let actor = try authenticate(request)
            caller.identify(actor)
            let query = try request.deviceListQuery()
            let page = try service.listDevices(of: actor, after: query.position, limit: query.limit)
            return .json(deviceListPage(page.devices, next: page.next).jsonValue)
        case (.device(let kid), _):
            let actor = try authenticate(request)
            caller.identify(actor)
            try service.revoke(kid: kid, by: actor)
            return HTTPResponse(status: 204, headers: ["Cache-Control": "no-store"])
        case (.approveDevice(let kid), _):
            let actor = try authenticate(request)
            caller.identify(actor)
            return .json(
                approvalEntry(try service.approve(kid: kid, assertion: try request.deviceApproval(), by: actor)))
        case (.jwks, _):
            return .json(signingKeys.jwks, headers: ["Cache-Control": "public, max-age=300"])
        case (.openIDConfiguration, _):
            return .json(
                ServerMetadata(keyAuthServerAt: issuer, dpopRequired: service.settings.dpop.mode == .required)
                    .jsonValue,
                headers: ["Cache-Control": "public, max-age=300"])
        case (.health, _):
            return operations.health()
        }
    }

    /// The device acting through a resource request's access token (and DPoP proof).
    private func authenticate(_ request: HTTPRequest) throws -> DeviceRecord {
        try service.authenticate(
            authorization: request.headers["Authorization"], proof: try request.dpopProof(atResource: true),
            method: request.method, path: request.path)
    }

    /// The user of a CIBA request: `login_hint`, the only hint keyauth takes (CIBA section 7.1
    /// asks for exactly one of three).
    private static func loginHint(_ form: [String: String]) throws(ServiceError) -> String {
        guard form["login_hint_token"] == nil, form["id_token_hint"] == nil else {
            throw ServiceError(.invalidRequest, "only login_hint is supported")
        }
        guard let user = form["login_hint"], !user.isEmpty else {
            throw ServiceError(.invalidRequest, "login_hint is missing")
        }
        return user
    }

    /// The address the rate limit counts: the peer, or behind a trusted proxy the last
    /// `X-Forwarded-For` hop (the one the proxy itself added; earlier hops are client-chosen).
    func clientAddress(of request: HTTPRequest) -> String {
        request.clientAddress(trustingProxy: trustProxy)
    }

    private func clientKey(_ request: HTTPRequest) -> RateLimitKey {
        RateLimitKey(address: clientAddress(of: request))
    }

    /// Methods outside the known set share one label, so clients cannot grow the metrics.
    private static func methodLabel(_ method: String) -> String {
        ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"].contains(method) ? method : "OTHER"
    }
}
