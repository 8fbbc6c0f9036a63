/// The authorization endpoint's routes (PROTOCOL.md section 10): the request itself, then the
/// sign-in and consent forms that carry it sealed.
extension AuthorizationEndpoint {
    static let routes = RouteTable<Endpoint>([
        // No HEAD: a GET from a signed-in browser issues an authorization code, and a HEAD
        // would issue one too and send its Location with no page to show for it. The request
        // is a navigation, which browsers and relying parties make with GET or POST only.
        RouteDeclaration(
            [.get, .post], root,
            .openID { responder, request, _, caller in
                try responder.authorization.authorizationRequest(request, caller: &caller)
            }),
        RouteDeclaration(
            [.post], root + "/sign-in",
            form { endpoint, request, form, caller in
                try endpoint.signIn(request, form: form, caller: &caller)
            }),
        RouteDeclaration(
            [.post], root + "/continue",
            form { endpoint, request, form, caller in
                try endpoint.continueSignIn(request, form: form, cancel: false, caller: &caller)
            }),
        RouteDeclaration(
            [.post], root + "/cancel",
            form { endpoint, request, form, caller in
                try endpoint.continueSignIn(request, form: form, cancel: true, caller: &caller)
            }),
        RouteDeclaration(
            [.post], root + "/consent",
            form { endpoint, request, form, caller in
                try endpoint.consent(request, form: form, caller: &caller)
            }),
        RouteDeclaration([.get, .head, .post], root + "/{unknown*}", .notFound),
    ])

    /// A form post: refused when cross-site, an error page when the form cannot be read or the
    /// query repeats a parameter, else `handle`.
    private static func form(
        _ handle:
            @escaping @Sendable (
                AuthorizationEndpoint, HTTPRequest, [String: String], inout KeyAuthResponder.Caller
            ) throws -> HTTPResponse
    ) -> Endpoint {
        .openID { responder, request, _, caller in
            let endpoint = responder.authorization
            if let refusal = endpoint.browser.crossSiteRefusal(request) { return refusal }
            guard request.repeatedQueryNames.isEmpty, let form = try? request.formBody() else {
                return endpoint.errorPage("The form could not be read.")
            }
            return try handle(endpoint, request, form, &caller)
        }
    }
}
