import KeyAuth

/// The OpenID Connect provider (PROTOCOL.md section 10): the rules of the code flow, free of
/// HTTP. It validates authorization requests, keeps pending ones sealed in the browser's forms,
/// issues and redeems codes, signs ID tokens, answers UserInfo and ends sessions; the endpoints
/// (`/authorize`, `/oauth/token`'s code grant, `/userinfo`, `/end-session`) only parse requests
/// and render its answers, and only it reads the clients, codes and sign-in requests in storage
/// or writes the flow's audit events.
struct OpenIDProvider: Sendable {
    /// Seconds a pending authorization request waits for the browser to sign in: longer than a
    /// sign-in request lives, so that the request outlives the approval it waits for.
    static let pendingLifetime: Int64 = 600
    /// The longest `state`, `nonce` and `login_hint` taken, in bytes.
    static let maximumParameterLength = 1024
    /// Seconds an authorization code may be redeemed (RFC 6749 section 4.1.2 advises at most 10
    /// minutes; the redirect and the back-channel request take a second or two).
    static let authorizationCodeLifetime: Int64 = 60

    let service: KeyAuthService
    var storage: any ServerStorage { service.storage }
    var now: @Sendable () -> Int64 { service.now }
    /// The issuer every answer names (`iss`).
    var issuer: String { service.settings.issuer }

    /// The provider's ID tokens, over the access tokens' keys and clock.
    var idTokens: IDTokens {
        IDTokens(
            keys: service.tokens.keys, issuer: issuer, lifetime: service.settings.accessTokenLifetime,
            clock: service.tokens.clock)
    }

    /// Whether an RS256 key can sign ID tokens: not with a `--signing-key-file` of another
    /// algorithm. A request that needs an ID token is refused without one before the user is
    /// asked to approve it for nothing.
    var canSignIDTokens: Bool {
        (try? idTokens.keys.currentRS256(at: service.tokens.clock.seconds)) != nil
    }

    /// Whether a space-separated `scope` asks for `openid`, which makes a token response carry an
    /// ID token.
    static func asksForOpenID(_ scope: String?) -> Bool {
        (scope ?? "").split(separator: " ").contains("openid")
    }

    /// The registered client `id`, or nil.
    func client(id: String) throws -> ClientRecord? {
        try storage.client(id: id)
    }

    // MARK: Pending requests

    /// The sealer of pending requests, over the signing keys.
    private var sealed: SealedAuthorizations { SealedAuthorizations(keys: service.tokens.keys) }

    /// `record` sealed for `purpose` (``SealedAuthorizations``), bound to the browser by the hash
    /// of its CSRF cookie `csrf`: the text the page's forms carry as `authorization`.
    func seal(_ record: PendingAuthorizationRecord, for purpose: SealedAuthorizations.Purpose, csrf: String)
        throws -> String
    {
        var record = record
        record.browserBinding = try BrowserSessions.hash(csrf)
        return try sealed.seal(record, for: purpose, now: now())
    }

    /// The pending request `reference` carries, when the server sealed it for `purpose`, it is
    /// alive, it is the browser's whose CSRF cookie is `csrf`, and its client still exists.
    func unseal(_ reference: String, for purpose: SealedAuthorizations.Purpose, csrf: String) throws
        -> (record: PendingAuthorizationRecord, client: ClientRecord)?
    {
        guard
            let record = sealed.unseal(
                reference, for: purpose, browserBinding: try BrowserSessions.hash(csrf), now: now()),
            let client = try client(id: record.clientID)
        else { return nil }
        return (record, client)
    }

    /// Marks the sealed request `reference` answered, once: a sealed request needs no row until a
    /// user acts, and then one in the replay cache (under a key no device's key id can equal),
    /// until it could no longer be presented anyway.
    ///
    /// - Returns: false when it was answered already.
    func claim(_ reference: String, until expiresAt: Int64) throws -> Bool {
        try storage.claimJTI(keyID: Self.answeredKeyID, jti: try Self.answeredName(of: reference), expiresAt: expiresAt)
    }

    /// Whether the sealed request `reference` was answered: a sign-in form sent again with the
    /// browser's Back button would otherwise start a request no redirect can end, and replace
    /// the browser's session with its waiting one.
    func isAnswered(_ reference: String) throws -> Bool {
        try storage.isJTIClaimed(keyID: Self.answeredKeyID, jti: try Self.answeredName(of: reference))
    }

    /// The replay cache's key for answered sealed requests; no device's key id can equal it.
    private static let answeredKeyID = "authorization"

    /// A reference's row in the replay cache: its hash, so the row cannot be unsealed.
    private static func answeredName(of reference: String) throws -> String {
        Base64URL.encode(try CryptoPrimitives.sha256(Array(reference.utf8)))
    }

    /// Whether the sign-in a waiting `session` asked for, now approved, is the one `record`
    /// needs: a sign-in request of kind `authorization` whose client and redirect URI (what the
    /// device showed) are the request's.
    func isApproval(of session: BrowserSessionRecord, for record: PendingAuthorizationRecord) throws -> Bool {
        guard let id = session.signInRequestID, let asked = try storage.signInRequest(id: id) else { return false }
        return asked.kind == .authorization && asked.clientID == record.clientID
            && asked.redirectURI?.isSameBytes(as: record.redirectURI) == true
    }

    /// The `acr` a signed-in `session` achieves for `record`'s `acr_values`: the first class asked
    /// for that the device which approved the session's sign-in meets, with its tier now and the
    /// statement it approved with; nil when it meets none (or the device is gone).
    func achievedContext(of session: BrowserSessionRecord, for record: PendingAuthorizationRecord) throws -> String? {
        guard let kid = session.approvingKID, let device = try storage.device(kid: kid) else { return nil }
        return RequestedAuthenticationContext(stored: record.acrValues).achieved(
            tier: device.tier, methods: session.methods)
    }

    /// Whether a signed-in session is recent enough for `max_age` (Core section 3.1.2.1). No
    /// session is for `max_age=0`, which asks for a sign-in now as `prompt=login` does (Core 1.0
    /// errata set 2): one signed in this same second would otherwise pass.
    func isFresh(_ session: BrowserSessionRecord, maxAge: Int64?) -> Bool {
        guard let maxAge else { return true }
        guard maxAge > 0 else { return false }
        guard let signedInAt = session.signedInAt else { return false }
        // Saturating: `signed_in_at` is read from storage, which this server did not necessarily
        // write, and a difference that overflows would end the whole process.
        return now().subtractingSaturating(signedInAt) <= maxAge
    }
}

extension KeyAuthService {
    /// The OpenID Connect provider over this service.
    var openID: OpenIDProvider { OpenIDProvider(service: self) }
}
