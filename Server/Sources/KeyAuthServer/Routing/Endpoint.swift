/// What answers one declared route of the public listener: a closure over the responder, and
/// how the route refuses a query that repeats a parameter.
///
/// Each feature declares its routes as `RouteDeclaration<Endpoint>` values beside its code
/// (`KeyAuthResponder+DeviceRoutes.swift`, `AccountPage+Routes.swift`, ...), and
/// ``KeyAuthResponder/routes`` puts them together: the router, the `405 Allow` header, the
/// metrics labels and the check of PROTOCOL.md's endpoint table all read that one list.
struct Endpoint: Sendable {
    /// RFC 6749 section 3.1 at every endpoint: a query naming a parameter twice is refused
    /// before anything reads it, since which value counts is what a smuggled second one wants
    /// to choose. How depends on who the answer is for.
    enum RepeatedQuery: Sendable {
        /// 400 `invalid_request` as JSON: API clients.
        case refused
        /// 400 as an HTML page: a person in a browser.
        case refusedAsPage
        /// The endpoint checks: its own error page, or a redirect to a client it validated.
        case endpointDecides
    }

    typealias Handler =
        @Sendable (KeyAuthResponder, HTTPRequest, RouteParameters, inout KeyAuthResponder.Caller) throws ->
        HTTPResponse

    let repeatedQuery: RepeatedQuery
    let respond: Handler

    /// An API endpoint: JSON errors.
    static func api(_ respond: @escaping Handler) -> Endpoint {
        Endpoint(repeatedQuery: .refused, respond: respond)
    }

    /// A page of the account site: a repeated parameter gets the refusal page.
    static func page(_ respond: @escaping Handler) -> Endpoint {
        Endpoint(repeatedQuery: .refusedAsPage, respond: respond)
    }

    /// An OpenID Connect browser endpoint, which answers a repeated parameter itself.
    static func openID(_ respond: @escaping Handler) -> Endpoint {
        Endpoint(repeatedQuery: .endpointDecides, respond: respond)
    }

    /// The answer for a path under a feature's prefix that names nothing: 404, counted under
    /// the feature's catch-all label instead of `unknown`.
    static let notFound = Endpoint(repeatedQuery: .endpointDecides) { _, _, _, _ in
        throw RoutingError.noSuchEndpoint
    }
}
