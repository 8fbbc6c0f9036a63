/// The account page's routes (PROTOCOL.md section 9): pages and assets to read, forms to post.
extension AccountPage {
    static let routes = RouteTable<Endpoint>(pages + forms + DeviceAction.allCases.map(deviceRoute) + [unknown])

    /// What a browser reads: the page, its assets (the icon at the root), and the waiting page's
    /// status.
    private static let pages: [RouteDeclaration<Endpoint>] = [
        RouteDeclaration(
            [.get, .head], root, .page { responder, request, _, _ in try responder.account.page(request) }),
        RouteDeclaration(
            [.get, .head], root + "/account.css",
            .page { _, _, _, _ in
                BrowserRequests.asset(AccountAssets.css, type: "text/css; charset=utf-8")
            }),
        RouteDeclaration(
            [.get, .head], root + "/account.js",
            .page { _, _, _, _ in
                BrowserRequests.asset(AccountAssets.javaScript, type: "text/javascript; charset=utf-8")
            }),
        RouteDeclaration(
            [.get, .head], AccountAssets.faviconPath,
            .page { _, _, _, _ in
                BrowserRequests.asset(
                    AccountAssets.favicon, type: "image/svg+xml", caching: AccountAssets.faviconCaching)
            }),
        RouteDeclaration(
            [.get, .head], root + "/sign-in/status",
            .page { responder, request, _, _ in
                try responder.account.signInStatus(request)
            }),
    ]

    /// The sign-in and sign-out forms.
    private static let forms: [RouteDeclaration<Endpoint>] = [
        RouteDeclaration(
            [.post], root + "/sign-in",
            form { page, request, _, form in
                try page.beginSignIn(request, form: form)
            }),
        RouteDeclaration(
            [.post], root + "/sign-in/continue",
            form { page, request, _, form in
                try page.continueSignIn(request, form: form)
            }),
        RouteDeclaration(
            [.post], root + "/sign-in/cancel",
            form { page, request, _, form in
                try page.end(request, form: form)
            }),
        RouteDeclaration(
            [.post], root + "/sign-out",
            form { page, request, _, form in
                try page.end(request, form: form)
            }),
        RouteDeclaration(
            [.post], root + "/recovery-codes",
            form { page, request, _, form in
                try page.requestRecoveryCodes(request, form: form)
            }),
        RouteDeclaration(
            [.post], root + "/recovery-codes/show",
            form { page, request, _, form in
                try page.showRecoveryCodes(request, form: form)
            }),
    ]

    /// Any other path under `/account`: 404, counted as `/account/{unknown}`.
    private static let unknown = RouteDeclaration<Endpoint>([.get, .head, .post], root + "/{unknown*}", .notFound)

    /// `POST /account/devices/{kid}/ACTION`.
    private static func deviceRoute(_ action: DeviceAction) -> RouteDeclaration<Endpoint> {
        RouteDeclaration(
            [.post], root + "/devices/{kid}/" + action.rawValue,
            form { page, request, parameters, form in
                try page.device(parameters["kid"], action: action, request: request, form: form)
            })
    }

    /// A form post: refused when cross-site (before the body is read), a refusal page when the
    /// form cannot be read, else `handle`.
    private static func form(
        _ handle:
            @escaping @Sendable (AccountPage, HTTPRequest, RouteParameters, [String: String]) throws ->
            HTTPResponse
    ) -> Endpoint {
        .page { responder, request, parameters, _ in
            let page = responder.account
            if let refusal = page.browser.crossSiteRefusal(request) { return refusal }
            let form: [String: String]
            do {
                form = try request.formBody()
            } catch {
                return page.browser.refused("The form could not be read.", status: 400)
            }
            return try handle(page, request, parameters, form)
        }
    }
}
