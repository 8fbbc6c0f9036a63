/// An OpenID Connect authorization request waiting for the browser to sign in or to consent
/// (`GET /authorize`, PROTOCOL.md section 10): its parameters travel sealed in the page
/// (``SealedAuthorizations``), so that nothing the page sends back is trusted unless the server
/// sealed it, and nothing is stored before a user acts.
package struct PendingAuthorizationRecord: Sendable, Hashable {
    /// SHA-256 of the browser's CSRF cookie when the request came: only that browser continues it.
    package var browserBinding: [UInt8]
    /// The relying party.
    package var clientID: String
    /// The redirect URI as sent, already matched against the registered ones.
    package var redirectURI: String
    /// The `scope` as sent (contains `openid`).
    package var scope: String
    /// The `state`, handed back unchanged.
    package var state: String?
    /// The `nonce`, put into the ID token unchanged.
    package var nonce: String?
    /// The PKCE `code_challenge` (S256).
    package var codeChallenge: String
    /// The `login_hint`, which prefills the user name.
    package var loginHint: String?
    /// When it can no longer be continued.
    package var expiresAt: Int64
    /// The authentication context classes asked for (`acr_values`, keyauth's only, in the order
    /// of preference); empty when none.
    package var acrValues: [String]
    /// The `max_age`, seconds: checked again when the user answers the consent page, which may be
    /// minutes after the request came.
    package var maxAge: Int64?

    /// Creates a record.
    package init(
        browserBinding: [UInt8], clientID: String, redirectURI: String, scope: String, state: String?,
        nonce: String?, codeChallenge: String, loginHint: String?, expiresAt: Int64, acrValues: [String] = [],
        maxAge: Int64? = nil
    ) {
        self.browserBinding = browserBinding
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.scope = scope
        self.state = state
        self.nonce = nonce
        self.codeChallenge = codeChallenge
        self.loginHint = loginHint
        self.expiresAt = expiresAt
        self.acrValues = acrValues
        self.maxAge = maxAge
    }
}

/// A one-time authorization code (PROTOCOL.md section 10): stored by its SHA-256, bound to the
/// client, the redirect URI, the PKCE challenge and the sign-in it stands for.
package struct AuthorizationCodeRecord: Sendable, Hashable {
    /// SHA-256 of the code (256 random bits).
    package var codeHash: [UInt8]
    package var clientID: String
    /// The redirect URI of the authorization request, which the token request must repeat.
    package var redirectURI: String
    /// The PKCE `code_challenge` (S256).
    package var codeChallenge: String
    /// The `nonce` of the authorization request.
    package var nonce: String?
    /// The `scope` granted.
    package var scope: String
    /// The user signed in.
    package var user: String
    /// The device whose approval signed the browser in.
    package var approvingKID: String
    /// When that approval happened (`auth_time`).
    package var authTime: Int64
    /// How the device checked the user (`amr`).
    package var methods: [String]
    /// The browser session's id as the ID token's `sid`.
    package var sessionID: String
    /// When the code can no longer be redeemed.
    package var expiresAt: Int64
    /// When it was redeemed; nil before.
    package var redeemedAt: Int64?
    /// The `jti` of the access token its redemption issued, revoked if the code comes again.
    package var accessTokenJTI: String?
    /// When that access token expires.
    package var accessTokenExpiresAt: Int64?
    /// The `acr` the sign-in achieved for the authorization request's `acr_values`; nil for a
    /// code stored before the server recorded it (the tokens then state the class of `methods`).
    package var acr: String?

    /// Creates a record.
    package init(
        codeHash: [UInt8], clientID: String, redirectURI: String, codeChallenge: String, nonce: String?, scope: String,
        user: String, approvingKID: String, authTime: Int64, methods: [String], sessionID: String, expiresAt: Int64,
        redeemedAt: Int64? = nil, accessTokenJTI: String? = nil, accessTokenExpiresAt: Int64? = nil, acr: String? = nil
    ) {
        self.codeHash = codeHash
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.codeChallenge = codeChallenge
        self.nonce = nonce
        self.scope = scope
        self.user = user
        self.approvingKID = approvingKID
        self.authTime = authTime
        self.methods = methods
        self.sessionID = sessionID
        self.expiresAt = expiresAt
        self.redeemedAt = redeemedAt
        self.accessTokenJTI = accessTokenJTI
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.acr = acr
    }
}

/// What ``AuthorizationStorage/redeemAuthorizationCode(codeHash:at:accessTokenJTI:accessTokenExpiresAt:)`` found.
package enum AuthorizationCodeRedemption: Sendable, Hashable {
    /// This call redeemed the code; the record as stored before.
    case redeemed(AuthorizationCodeRecord)
    /// The code was redeemed before: the record with the first redemption's token.
    case alreadyRedeemed(AuthorizationCodeRecord)
    /// No such code, or one past its expiry.
    case unknown
    /// The device that approved the sign-in is no longer active (or no longer the user's); the
    /// code was left unredeemed.
    case approverInactive
}
