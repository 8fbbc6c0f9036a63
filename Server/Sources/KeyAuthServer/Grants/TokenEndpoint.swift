import KeyAuth

/// `POST /oauth/token` (PROTOCOL.md section 4, "Log in", section 8 and section 10): the grant
/// registry and the steps every grant shares, under the per-address attempt limits.
///
/// Every refused attempt counts as a failure of the sending address except what the grant
/// says is an expected answer (a CIBA poll's pending, too fast, denied, expired); so an
/// application signing many users in is not locked out, while a failed client authentication or
/// an unknown `auth_req_id` counts.
struct TokenEndpoint: Sendable {
    /// The grants this server answers, in the order the refusal of another grant names them.
    static func standardHandlers(service: KeyAuthService) -> [any TokenGrantHandler] {
        [JWTBearerGrant(service: service), CIBAGrant(service: service), AuthorizationCodeGrant(service: service)]
    }

    let service: KeyAuthService
    let limits: AttemptLimits
    let metrics: ServerMetrics
    /// The handlers, in registration order.
    let handlers: [any TokenGrantHandler]

    init(
        service: KeyAuthService, limits: AttemptLimits, metrics: ServerMetrics,
        handlers: [any TokenGrantHandler]? = nil
    ) {
        self.service = service
        self.limits = limits
        self.metrics = metrics
        self.handlers = handlers ?? Self.standardHandlers(service: service)
    }

    /// Answers a token request from `address`, naming in `caller` the user, device and client it
    /// turned out to be for.
    func respond(
        to request: HTTPRequest, from address: RateLimitKey, caller: inout KeyAuthResponder.Caller
    ) throws -> HTTPResponse {
        // Which grant the request is, once known: its metrics family and its failure rule. Before
        // that (no form, an unknown grant type) the attempt counts as a device login's.
        var chosen: (any TokenGrantHandler)?
        return try limits.run(
            from: address, everyAttempt: nil,
            counts: { kind in chosen?.countsAsFailure(kind) ?? AttemptLimits.countsAsFailure(kind) },
            record: { result in
                if let chosen { chosen.record(result, in: metrics) } else { metrics.recordLogin(result: result) }
            }
        ) {
            let form = try request.formBody()
            let handler = try handler(for: form["grant_type"])
            chosen = handler
            let credentials =
                handler.clientAuthentication == .none ? nil : try request.clientCredentials(form: form)
            for name in handler.requiredParameters where (form[name] ?? "").isEmpty {
                throw ServiceError(.invalidRequest, "\(name) is missing")
            }
            let proof =
                handler.acceptsDPoP ? try service.checkTokenRequestProof(try request.dpopProof(atResource: false)) : nil
            let client: ClientRecord?
            switch handler.clientAuthentication {
            case .none: client = nil
            case .confidential: client = try service.clients.authenticate(credentials)
            case .confidentialOrPublic:
                client = try service.clients.identify(
                    credentials: credentials, publicID: credentials == nil ? form["client_id"] : nil)
            }
            caller.clientID = client?.id
            let outcome = try handler.grant(TokenGrantRequest(form: form, client: client, proof: proof))
            caller.user = outcome.user
            caller.deviceKID = outcome.deviceKID
            return (outcome.response, outcome.result)
        }
    }

    /// The handler registered for `grantType`.
    ///
    /// - Throws: `.invalidRequest` without a grant type; `.unsupportedGrantType` for one no
    ///   handler answers, naming those that do.
    private func handler(for grantType: String?) throws(ServiceError) -> any TokenGrantHandler {
        guard let grantType, !grantType.isEmpty else { throw ServiceError(.invalidRequest, "grant_type is missing") }
        if let handler = handlers.first(where: { $0.grantType.rawValue == grantType }) { return handler }
        var names = handlers.map { "\($0.grantType)" }
        let last = names.popLast() ?? ""
        let list = names.isEmpty ? last : names.joined(separator: ", ") + " and " + last
        throw ServiceError(.unsupportedGrantType, "only \(list) are supported")
    }
}
