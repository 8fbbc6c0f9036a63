import KeyAuth

/// A client application that may start sign-in requests (`keyauth-server clients add NAME`).
///
/// Only the SHA-256 of its secret is kept: the secret is 256 random bits, so a hash without salt
/// or stretching already makes the stored value useless for guessing, and checking it costs one
/// hash per request.
package struct ClientRecord: Sendable, Hashable {
    /// The `client_id`: random and unguessable, so that it names a client without vouching for it.
    package var id: String
    /// The name shown to the user on their device ("Support desk").
    package var name: String
    /// SHA-256 of the `client_secret`.
    package var secretHash: [UInt8]
    /// When the administrator added it.
    package var createdAt: Int64
    /// Where the authorization endpoint may send a browser back with a code (OpenID Connect);
    /// empty for a client that only starts CIBA requests.
    package var redirectURIs: [String]
    /// Where `/end-session` may send a browser after signing it out.
    package var postLogoutRedirectURIs: [String]
    /// A public client (a native app) has no secret and proves itself by PKCE alone; its
    /// `secretHash` is empty, which no presented secret hashes to.
    package var isPublic: Bool
    /// An application, or a host whose `pam_keyauth` starts push logins (docs/HOST-LOGIN.md).
    package var kind: ClientKind
    /// For a host: the users who may log in to it; empty for every user.
    package var allowedUsers: [String]

    /// Creates a record.
    package init(
        id: String, name: String, secretHash: [UInt8], createdAt: Int64, redirectURIs: [String] = [],
        postLogoutRedirectURIs: [String] = [], isPublic: Bool = false, kind: ClientKind = .application,
        allowedUsers: [String] = []
    ) {
        self.id = id
        self.name = name
        self.secretHash = secretHash
        self.createdAt = createdAt
        self.redirectURIs = redirectURIs
        self.postLogoutRedirectURIs = postLogoutRedirectURIs
        self.isPublic = isPublic
        self.kind = kind
        self.allowedUsers = allowedUsers
    }
}

/// Who started a sign-in request: the one record serves every way in, so that approval, the
/// device list of requests and the browser session are written once.
package enum SignInRequestKind: String, Sendable, Hashable, CaseIterable {
    /// A registered client's CIBA request (`POST /bc-authorize`).
    case backchannel
    /// The server's own account page, its built-in CIBA client.
    case account
    /// A relying party's OpenID Connect authorization request (`GET /authorize`), signed in
    /// through the account page's flow; carries the client and its redirect URI.
    case authorization
    /// The account page's request to approve a pending device of the signed-in user (its key id
    /// in ``SignInRequestRecord/subject``): approved on one of the user's active devices, it
    /// activates the pending one.
    case device
    /// The account page's request to make a new set of recovery codes for the signed-in user:
    /// approved on one of the user's active devices, it lets the page show the new codes once,
    /// to the browser session named in ``SignInRequestRecord/subject`` only.
    case recoveryCodes = "recovery-codes"
    /// A notice to the user's other devices that a recovery code enrolled the device
    /// ``SignInRequestRecord/subject``: denying it revokes that device; it cannot be approved.
    case recovery

    /// Who may start a request of this kind, which decides its limits: anyone with a browser
    /// (`account`, `authorization`), an authenticated client (`backchannel`), a signed-in
    /// user (`device`, `recovery-codes`), or the server itself (`recovery`).
    package var origin: SignInRequestOrigin {
        switch self {
        case .backchannel: .client
        case .account, .authorization: .anonymous
        case .device, .recoveryCodes: .signedIn
        case .recovery: .server
        }
    }
}

/// Who starts sign-in requests of a kind: each origin has its own limits, so that no anonymous
/// party can use up what a registered client or the user's own session needs.
package enum SignInRequestOrigin: Sendable, Hashable, CaseIterable {
    case anonymous
    case client
    case signedIn
    /// The server's own notices (a recovery code used).
    case server

    /// The kinds of this origin.
    package var kinds: [SignInRequestKind] {
        SignInRequestKind.allCases.filter { $0.origin == self }
    }
}

/// Where a sign-in request is in its life: `pending` until a device answers, then `approved` or
/// `denied`; an approved request becomes `issued` once its result (a token, a browser session)
/// was handed out, so that it is handed out only once. Expiry is a time, not a state.
package enum SignInRequestStatus: String, Sendable, Hashable, CaseIterable {
    case pending
    case approved
    case denied
    case issued
}

/// One request to sign a user in, waiting for a device of that user to approve or deny it.
package struct SignInRequestRecord: Sendable, Hashable {
    /// The `auth_req_id`: 256 random bits, base64url.
    package var id: String
    /// Who started it.
    package var kind: SignInRequestKind
    /// The client, for `backchannel` requests.
    package var clientID: String?
    /// The user asked to approve.
    package var user: String
    /// What both screens show, so that the user approves the request in front of them.
    package var bindingMessage: String
    /// The `scope` the client asked for, as sent.
    package var scope: String?
    /// The client address the request came from (the application's server, or the browser).
    package var requestedFrom: String?
    /// Where an `authorization` request sends the browser back: its host is shown to the user
    /// next to the client's name.
    package var redirectURI: String?
    /// The state.
    package var status: SignInRequestStatus
    /// When it was made.
    package var createdAt: Int64
    /// When it can no longer be answered or collected.
    package var expiresAt: Int64
    /// Seconds the client must wait between polls; raised by 5 each time it polls faster.
    package var pollInterval: Int64
    /// When the client last polled the token endpoint for it.
    package var lastPolledAt: Int64?
    /// When a device answered.
    package var answeredAt: Int64?
    /// The device that answered.
    package var answeringKID: String?
    /// How the answering device says the user was checked (RFC 8176 `amr` values).
    package var methods: [String]
    /// Wrong codes typed on approving devices so far (number matching).
    package var codeAttempts: Int
    /// What a `device` request approves, or a `recovery` notice names: the device's key id.
    package var subject: String?
    /// The authentication context classes the request asked for (`acr_values`, keyauth's only,
    /// in the order of preference): only an approval meeting one of them completes it. Empty
    /// when it asked for none.
    package var acrValues: [String]
    /// The account page's session that made a `device` or `recovery-codes` request (base64url of
    /// its id's SHA-256), the only one shown its code, and for `recovery-codes` the only one that
    /// collects the codes: another session of the same user, a stolen cookie's say, must not be
    /// able to put that code in front of the user for a device of its own, or take the codes.
    /// Nil for the other kinds, and for a `device` request stored before this was recorded (whose
    /// code no page shows).
    package var requestedBy: String?

    /// Creates a record.
    package init(
        id: String, kind: SignInRequestKind, clientID: String?, user: String, bindingMessage: String,
        scope: String? = nil, requestedFrom: String? = nil, status: SignInRequestStatus = .pending, createdAt: Int64,
        expiresAt: Int64, pollInterval: Int64 = 5, lastPolledAt: Int64? = nil, answeredAt: Int64? = nil,
        answeringKID: String? = nil, methods: [String] = [], redirectURI: String? = nil, codeAttempts: Int = 0,
        subject: String? = nil, acrValues: [String] = [], requestedBy: String? = nil
    ) {
        self.id = id
        self.kind = kind
        self.clientID = clientID
        self.user = user
        self.bindingMessage = bindingMessage
        self.scope = scope
        self.requestedFrom = requestedFrom
        self.status = status
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.pollInterval = pollInterval
        self.lastPolledAt = lastPolledAt
        self.answeredAt = answeredAt
        self.answeringKID = answeringKID
        self.methods = methods
        self.redirectURI = redirectURI
        self.codeAttempts = codeAttempts
        self.subject = subject
        self.acrValues = acrValues
        self.requestedBy = requestedBy
    }

    /// The id hash of the session ``requestedBy`` names (``BrowserSessionRecord/requestTag``),
    /// to find its row.
    package var askingSessionHash: [UInt8]? { requestedBy.flatMap { Base64URL.decode($0) } }

    /// Where the request sits among a user's requests: by creation time, then by id.
    package var position: SignInRequestPosition {
        SignInRequestPosition(createdAt: createdAt, id: id)
    }
}

/// A place among a user's sign-in requests, ordered by (`created_at`, `id`): a device that
/// watches for requests waits for one after the last it saw.
package struct SignInRequestPosition: Sendable, Hashable, Comparable {
    /// The creation time.
    package var createdAt: Int64
    /// The request id.
    package var id: String

    /// Creates a position.
    package init(createdAt: Int64, id: String) {
        self.createdAt = createdAt
        self.id = id
    }

    /// Before every request.
    package static let start = SignInRequestPosition(createdAt: Int64.min, id: "")

    /// Creation time first, then the id's bytes, as both databases order them.
    package static func < (lhs: Self, rhs: Self) -> Bool {
        guard lhs.createdAt == rhs.createdAt else { return lhs.createdAt < rhs.createdAt }
        return lhs.id.utf8.lexicographicallyPrecedes(rhs.id.utf8)
    }
}

/// The limits a new sign-in request is stored under, all counted over the requests of the same
/// user and the same origin (``SignInRequestOrigin``) in one atomic step.
package struct SignInRequestLimits: Sendable, Hashable {
    /// Open (pending, unexpired) requests at most.
    package var maximumOpen: Int
    /// Requests made within the last ``window`` seconds at most, open or not: prompts reaching
    /// a user are capped over time, not only while they are open.
    package var maximumPerWindow: Int
    /// The window of ``maximumPerWindow``, in seconds.
    package var window: Int64
    /// Whether a new request replaces (expires) an open one of the same origin from the same
    /// address: a browser that starts again supersedes its own earlier wait.
    package var replacesSameAddress: Bool
    /// Requests made within the window from the new request's address at most, besides the
    /// user's total: one party's share, so that it cannot use up what the user's own browser needs.
    package var maximumPerWindowFromAddress: Int?
    /// One client's share, for requests that name one (``SignInRequestRecord/clientID``): open
    /// requests, and requests made within the window, at most, besides the user's totals, so that
    /// one client (a misbehaving application, one compromised host) cannot use up what the
    /// user's other clients need.
    package var maximumOpenFromClient: Int?
    /// See ``maximumOpenFromClient``.
    package var maximumPerWindowFromClient: Int?

    /// Creates limits.
    package init(
        maximumOpen: Int, maximumPerWindow: Int, window: Int64 = 3600, replacesSameAddress: Bool = false,
        maximumPerWindowFromAddress: Int? = nil, maximumOpenFromClient: Int? = nil,
        maximumPerWindowFromClient: Int? = nil
    ) {
        self.maximumOpen = maximumOpen
        self.maximumPerWindow = maximumPerWindow
        self.window = window
        self.replacesSameAddress = replacesSameAddress
        self.maximumPerWindowFromAddress = maximumPerWindowFromAddress
        self.maximumOpenFromClient = maximumOpenFromClient
        self.maximumPerWindowFromClient = maximumPerWindowFromClient
    }
}

/// What ``SignInStorage/insertSignInRequest(_:limits:now:)`` did.
package enum SignInRequestInsertion: Sendable, Hashable {
    /// The request was stored.
    case inserted
    /// The user already has the most open requests of this origin; carries the earliest expiry
    /// among them, when a place frees up.
    case tooManyOpen(earliestExpiry: Int64)
    /// The user got the most requests of this origin the window allows; carries when the oldest
    /// of them leaves the window.
    case tooManyInWindow(retryAt: Int64)
    /// The request's client holds its share of the user's requests (open, or made within the
    /// window); carries when a place of that share frees up.
    case clientShareUsed(retryAt: Int64)
}

/// What ``SignInStorage/recordWrongCode(id:maximumAttempts:answeringKID:at:)`` did.
package enum WrongCodeOutcome: Sendable, Hashable {
    /// Counted; this many attempts remain.
    case tryAgain(attemptsLeft: Int)
    /// That was the last attempt: the request is denied now.
    case denied
    /// The request is not pending any more (answered, expired or unknown).
    case closed
}

/// A browser's session with the account page, kept on the server: the cookie holds only a random
/// id, whose SHA-256 is the key here, so a copy of the table opens no session.
///
/// One type for both stages: while a sign-in request waits for the user's device the session
/// names it (``signInRequestID``); once approved, it names the user and the device that approved
/// (``approvingKID``), and ends when that device is revoked.
package struct BrowserSessionRecord: Sendable, Hashable {
    /// SHA-256 of the cookie's session id.
    package var idHash: [UInt8]
    /// The CSRF token every form of this session carries.
    package var csrfToken: String
    /// The user signing in, or signed in.
    package var user: String
    /// The sign-in request the browser waits for; nil when the user name matched no one who
    /// could approve (the page waits the same, so that it tells nobody which names exist).
    package var signInRequestID: String?
    /// The code shown while waiting.
    package var bindingCode: String
    /// The device that approved the sign-in; nil while waiting.
    package var approvingKID: String?
    /// How the approving device says the user was checked.
    package var methods: [String]
    /// When the session began.
    package var createdAt: Int64
    /// When it ends unless used again (sliding).
    package var expiresAt: Int64
    /// When the sign-in completed; nil while waiting.
    package var signedInAt: Int64?
    /// The client whose sign-in (`/authorize`) the session waits for or was approved for; nil
    /// for the account page's. Such a session signs the browser in to applications, not to the
    /// account page: the user approved "Sign in to Team wiki", not the management of their
    /// devices. Set when the session starts, so that the account page answers a waiting one the
    /// same whether the name has a device to ask or not.
    package var signedInFor: String?

    /// Creates a record.
    package init(
        idHash: [UInt8], csrfToken: String, user: String, signInRequestID: String?, bindingCode: String,
        approvingKID: String? = nil, methods: [String] = [], createdAt: Int64, expiresAt: Int64,
        signedInAt: Int64? = nil, signedInFor: String? = nil
    ) {
        self.idHash = idHash
        self.csrfToken = csrfToken
        self.user = user
        self.signInRequestID = signInRequestID
        self.bindingCode = bindingCode
        self.approvingKID = approvingKID
        self.methods = methods
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.signedInAt = signedInAt
        self.signedInFor = signedInFor
    }

    /// Whether the sign-in completed.
    package var isSignedIn: Bool { signedInAt != nil && approvingKID != nil }

    /// Whether the sign-in completed with an approval for the account page itself.
    package var isSignedInToAccountPage: Bool { isSignedIn && signedInFor == nil }

    /// Whether the session is an application's, waiting or signed in.
    package var isApplicationSession: Bool { signedInFor != nil }

    /// What names this session in the sign-in requests it makes (`requested_by`): base64url of
    /// its id's SHA-256, never the id, so that the table of requests holds nothing a cookie is made
    /// of.
    package var requestTag: String { Self.requestTag(idHash: idHash) }

    /// ``requestTag`` of the session whose id hashes to `idHash`.
    package static func requestTag(idHash: [UInt8]) -> String { Base64URL.encode(idHash) }
}
