import KeyAuth

/// Push sign-in (PROTOCOL.md section 8): client applications ask (CIBA), the user's devices
/// list the open requests, check the typed code and answer.
extension KeyAuthResponder {
    /// Push sign-in: clients ask (CIBA), devices list, check codes and answer (section 8).
    static let signInRequestRoutes = RouteTable<Endpoint>([
        RouteDeclaration(
            [.post], "/bc-authorize",
            .api { responder, request, _, caller in
                try responder.backchannelAuthorize(request, caller: &caller)
            }),
        RouteDeclaration(
            [.get, .head], "/v1/auth-requests",
            .api { responder, request, _, caller in
                try responder.listSignInRequests(request, caller: &caller)
            }),
        RouteDeclaration(
            [.post], "/v1/auth-requests/{id}",
            .api { responder, request, parameters, caller in
                try responder.answerSignInRequest(parameters["id"], request, caller: &caller)
            }),
        RouteDeclaration(
            [.post], "/v1/auth-requests/{id}/code",
            .api { responder, request, parameters, caller in
                try responder.checkSignInCode(parameters["id"], request, caller: &caller)
            }),
    ])

    /// `POST /bc-authorize`: an authenticated client asks a user to approve a sign-in.
    ///
    /// Only what comes before the client authenticates counts against the address's failures
    /// (a wrong secret, a malformed form): that is what guessing looks like. After it, a refusal
    /// is about one user's request (a mistyped name, a user the host does not admit, push
    /// fatigue's `slow_down`), and counting it would lock every user of the client's address
    /// out of logins and polls for a minute.
    func backchannelAuthorize(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        var authenticated = false
        return try limits.run(
            from: clientKey(request), everyAttempt: nil,
            counts: { kind in !authenticated && AttemptLimits.countsAsFailure(kind) },
            record: metrics.recordSignInRequest
        ) {
            let form = try request.formBody()
            let client = try service.clients.authenticate(try request.clientCredentials(form: form))
            caller.clientID = client.id
            authenticated = true
            let user = try Self.loginHint(form)
            try HostClients.checkAllowed(user, at: client)
            if OpenIDProvider.asksForOpenID(form["scope"]) && !service.openID.canSignIDTokens {
                throw ServiceError(.invalidRequest, "scope openid needs an ID token; this server has no RS256 key")
            }
            guard let context = RequestedAuthenticationContext(parameter: form["acr_values"]) else {
                throw ServiceError(
                    .invalidRequest,
                    "acr_values is longer than \(RequestedAuthenticationContext.maximumLength) bytes")
            }
            let started = try service.signIn.start(
                kind: .backchannel, clientID: client.id, user: user,
                bindingMessage: form["binding_message"], scope: form["scope"],
                requestedExpiry: form["requested_expiry"], from: clientAddress(of: request),
                acrValues: context.values)
            // A user with a device that can approve: the request was made for them.
            caller.user = started.user
            return (Self.backchannelResponse(started, now: service.now()), "created")
        }
    }

    /// `GET /v1/auth-requests`: the open requests now, or a long poll until one arrives.
    func listSignInRequests(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request, identifying: &caller)
        let query = try request.signInRequestQuery()
        let later = DeferredResponse()
        let path = request.path
        let watch = try service.signIn.open(for: actor.user, after: query.after, waiting: query.wait) {
            [self] result in
            // Off the request's thread, so in a scope of its own: the device's status read here
            // is answered from once it is durable, as the request's own reads are.
            let (response, scope) = DurabilityScope.run {
                Self.response {
                    // A device revoked while its poll waited sees its user's requests no more.
                    guard let current = try service.storage.device(kid: actor.kid), current.status == .active else {
                        throw ServiceError(.invalidToken, "the access token is not valid")
                    }
                    return .json(try signInRequestList(try result.get(), after: query.after).jsonValue)
                }
            }
            scope.whenDurable { failure in
                later.complete(with: failure.map { self.failure($0, at: path) } ?? response)
            }
        }
        switch watch {
        case .now(let requests): return .json(try signInRequestList(requests, after: query.after).jsonValue)
        case .later: return .deferred(later)
        }
    }

    /// `POST /v1/auth-requests/{id}/code`: checks the code the user typed on this device.
    func checkSignInCode(_ id: String, _ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request, identifying: &caller)
        let checked = try service.checkSignInCode(id: id, code: try request.signInCode(), by: actor)
        return .json(
            .object(["id": .string(checked.id), "status": .string(checked.status.rawValue), "code": "matches"]))
    }

    /// `POST /v1/auth-requests/{id}`: a device approves (with an assertion) or denies.
    func answerSignInRequest(_ id: String, _ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request)
        let answer = try request.signInAnswer()
        let answered = try service.answerSignInRequest(
            id: id, decision: answer.decision, assertion: answer.assertion, by: actor)
        metrics.recordSignInRequest(result: answered.status.rawValue)
        return .json(.object(["id": .string(answered.id), "status": .string(answered.status.rawValue)]))
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
}
