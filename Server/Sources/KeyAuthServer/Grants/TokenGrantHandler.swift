import KeyAuth

/// One grant type of `POST /oauth/token` (RFC 6749 section 4, and the specifications that add
/// grants: RFC 7523's JWT bearer, CIBA), behind the steps all grants share.
///
/// ``TokenEndpoint`` reads the form, picks the handler registered for its `grant_type`, and
/// before calling ``grant(_:)`` runs once what grants have in common, in this order: the
/// client's credentials read from the request, the grant's required parameters, the DPoP proof
/// (for a grant that binds tokens to keys), the client authentication. The handler then only
/// does what makes it that grant. A new grant (device authorization, token exchange) is one
/// new type added to ``TokenEndpoint/standardHandlers``.
///
/// The standard grants are final classes: the endpoint picks one out of its array for every
/// request, and copying a class reference is one retain where copying a struct holding the
/// service retained every one of the service's references.
protocol TokenGrantHandler: Sendable {
    /// The `grant_type` the handler answers.
    var grantType: OAuthGrantType { get }
    /// Form parameters without which the request is refused with `invalid_request` ("NAME is
    /// missing") before anything is checked; checked in this order.
    var requiredParameters: [String] { get }
    /// Who must authenticate before the grant runs.
    var clientAuthentication: TokenClientAuthentication { get }
    /// Whether the grant binds its token to a DPoP proof's key (RFC 9449 section 5): the
    /// endpoint then checks the proof first. A grant that issues only Bearer tokens leaves the
    /// header unread.
    var acceptsDPoP: Bool { get }

    /// Whether a refusal of `kind` counts against the address's failed-attempt budget
    /// (PROTOCOL.md section 6).
    func countsAsFailure(_ kind: ServiceError.Kind) -> Bool

    /// Counts one outcome (`result`: the grant's own result, `slow_down`, or an OAuth error
    /// code) in the metrics family of this grant.
    func record(_ result: String, in metrics: ServerMetrics)

    /// Issues the grant's tokens.
    ///
    /// - Throws: ``ServiceError`` with the OAuth error the client gets; ``StorageError``.
    func grant(_ request: TokenGrantRequest) throws -> TokenGrantOutcome
}

extension TokenGrantHandler {
    /// By default every refusal counts but `authorization_pending`, which polling clients get by
    /// design.
    func countsAsFailure(_ kind: ServiceError.Kind) -> Bool { kind != .authorizationPending }
}

/// How a grant's client authenticates at the token endpoint.
enum TokenClientAuthentication: Sendable {
    /// No client: a device's own assertion is the credential.
    case none
    /// A confidential client with its secret (RFC 6749 section 2.3.1).
    case confidential
    /// A confidential client with its secret, or a public client by `client_id` alone (the
    /// code grant with PKCE, RFC 8252).
    case confidentialOrPublic
}

/// What a grant handler gets: the form, and what the shared steps established.
struct TokenGrantRequest: Sendable {
    /// The decoded form body, repeated parameters already refused.
    let form: [String: String]
    /// The client, authenticated as the grant asks; nil for ``TokenClientAuthentication/none``.
    let client: ClientRecord?
    /// The checked DPoP proof, when the grant accepts one and the request carries it.
    let proof: VerifiedDPoPProof?

    /// A parameter listed in ``TokenGrantHandler/requiredParameters``, present and non-empty.
    func required(_ name: String) -> String { form[name] ?? "" }
}

/// A grant's answer, with what the metrics and the request log record of it.
struct TokenGrantOutcome: Sendable {
    let response: HTTPResponse
    /// The result the metrics count (`success`, `issued`).
    let result: String
    /// The user signed in and the device behind the token, for the request log.
    var user: String?
    var deviceKID: String?
}
