import KeyAuth

/// The public listener's routes (PROTOCOL.md section 4), declared once per feature. `/metrics`
/// is not one of them: the metrics listener serves it (``OperationsResponder``).
extension KeyAuthResponder {
    /// Every route, in the order they are tried.
    static let routes = RouteTable<Endpoint>.combining([
        deviceRoutes, tokenRoutes, signInRequestRoutes, discoveryRoutes, AccountPage.routes,
        AuthorizationEndpoint.routes, openIDRoutes, sshRoutes,
    ])

    /// The token endpoint and its grants (``TokenEndpoint``).
    static let tokenRoutes = RouteTable<Endpoint>([
        RouteDeclaration(
            [.post], "/oauth/token",
            .api { responder, request, _, caller in
                try responder.tokenEndpoint.respond(to: request, from: responder.clientKey(request), caller: &caller)
            })
    ])

    /// What clients read to find the rest: keys, metadata, health.
    static let discoveryRoutes = RouteTable<Endpoint>([
        RouteDeclaration(
            [.get, .head], "/.well-known/jwks.json",
            .api { responder, _, _, _ in
                .json(line: responder.signingKeys.jwks, headers: ["Cache-Control": "public, max-age=300"])
            }),
        RouteDeclaration(
            [.get, .head], "/.well-known/openid-configuration",
            .api { responder, _, _, _ in
                .json(
                    ServerMetadata(
                        keyAuthServerAt: responder.issuer,
                        dpopRequired: responder.service.settings.dpop.mode == .required
                    ).jsonValue,
                    headers: ["Cache-Control": "public, max-age=300"])
            }),
        RouteDeclaration([.get, .head], "/healthz", .api { responder, _, _, _ in responder.operations.health() }),
    ])

    /// UserInfo and RP-Initiated Logout (section 10); `/authorize` declares its own.
    static let openIDRoutes = RouteTable<Endpoint>([
        RouteDeclaration(
            [.get, .head, .post], UserInfoEndpoint.path,
            .api { responder, request, _, caller in
                try responder.userInfo.respond(to: request, caller: &caller)
            }),
        // No HEAD, as for `/authorize`: a GET with a hint proving the session ends it.
        RouteDeclaration(
            [.get, .post], EndSessionEndpoint.path,
            .openID { responder, request, _, caller in
                try responder.endSession.respond(to: request, caller: &caller)
            }),
    ])
}
