/// An error answer from the server in the shape of RFC 6749 section 5.2.
///
/// The server reports every failure this way (PROTOCOL.md section 6), so callers decide on the
/// ``error`` code and never on the human text. A ``KeyAuthError`` from ``KeyAuthClient`` carries it
/// as `underlying` (see ``KeyAuthError/oauthError``): `authorization_pending` becomes
/// `.approvalPending` so that the ``Authenticator`` polls, everything else `.serverRejected`.
public struct OAuthError: Error, Sendable, Hashable, CustomStringConvertible {
    /// An RFC 6749 / RFC 6750 / RFC 8628 error code; a struct so that codes a newer server sends
    /// still compare and print.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The codes that refuse a login or its token (the client exits 77 for them): a
        /// refusal means something only where a login was asked for.
        package static let loginRefusals: [Code] = [.invalidGrant, .accessDenied, .expiredToken, .invalidToken]

        /// A malformed request, a missing field, a bad user or key format.
        public static let invalidRequest = Code(rawValue: "invalid_request")
        /// The grant type is not the JWT bearer grant.
        public static let unsupportedGrantType = Code(rawValue: "unsupported_grant_type")
        /// The assertion failed a check: unknown, revoked or wrong key, bad signature, replay.
        public static let invalidGrant = Code(rawValue: "invalid_grant")
        /// The device is registered and waits for another device to approve it (RFC 8628).
        public static let authorizationPending = Code(rawValue: "authorization_pending")
        /// The pending device was denied, or an enrollment code is required or wrong.
        public static let accessDenied = Code(rawValue: "access_denied")
        /// The pending registration expired before anyone approved it (RFC 8628).
        public static let expiredToken = Code(rawValue: "expired_token")
        /// Too many failures from this address; wait ``OAuthError/retryAfter`` seconds.
        public static let slowDown = Code(rawValue: "slow_down")
        /// The Bearer access token is missing, malformed or expired (RFC 6750).
        public static let invalidToken = Code(rawValue: "invalid_token")
        /// An unknown path or device.
        public static let notFound = Code(rawValue: "not_found")
        /// A known path with the wrong method.
        public static let methodNotAllowed = Code(rawValue: "method_not_allowed")
        /// A DPoP proof is missing or fails a check (RFC 9449 section 5.3 and 7.1).
        public static let invalidDPoPProof = Code(rawValue: "invalid_dpop_proof")
        /// The DPoP proof must carry the nonce of the answer's `DPoP-Nonce` header (RFC 9449
        /// section 8).
        public static let useDPoPNonce = Code(rawValue: "use_dpop_nonce")
        /// The server failed; it never says why.
        public static let serverError = Code(rawValue: "server_error")
        /// The server's storage is unreachable; retry later.
        public static let temporarilyUnavailable = Code(rawValue: "temporarily_unavailable")
        /// Client authentication failed: unknown client, wrong secret, none given (RFC 6749).
        public static let invalidClient = Code(rawValue: "invalid_client")
        /// The user a sign-in request names has no device to approve it (CIBA section 13).
        public static let unknownUserID = Code(rawValue: "unknown_user_id")
        /// The binding message is too long or not printable (CIBA section 13).
        public static let invalidBindingMessage = Code(rawValue: "invalid_binding_message")
        /// The sign-in request was already answered, by this or another device.
        public static let alreadyAnswered = Code(rawValue: "already_answered")
        /// The code typed on the approving device is not the one shown where the sign-in started
        /// (number matching); the answer's `attempts_left` says how many tries remain.
        public static let wrongCode = Code(rawValue: "wrong_code")

        // The authorization endpoint's and UserInfo's codes: a relying party reads them at its
        // redirect URI or in a `WWW-Authenticate` challenge, never through ``KeyAuthClient``.

        /// The request names a `response_type` other than `code` (RFC 6749 section 4.1.2.1).
        package static let unsupportedResponseType = Code(rawValue: "unsupported_response_type")
        /// The requested scope lacks `openid` (RFC 6749 section 4.1.2.1).
        package static let invalidScope = Code(rawValue: "invalid_scope")
        /// The request carries a `request` object (OpenID Connect Core section 3.1.2.6).
        package static let requestNotSupported = Code(rawValue: "request_not_supported")
        /// The request carries a `request_uri` (OpenID Connect Core section 3.1.2.6).
        package static let requestURINotSupported = Code(rawValue: "request_uri_not_supported")
        /// `prompt=none` and no signed-in browser session (OpenID Connect Core section 3.1.2.6).
        package static let loginRequired = Code(rawValue: "login_required")
        /// `prompt=none` and the user must still allow the sign-in on the consent page.
        package static let consentRequired = Code(rawValue: "consent_required")
        /// The access token lacks the scope the resource needs (RFC 6750 section 3.1).
        package static let insufficientScope = Code(rawValue: "insufficient_scope")
    }

    /// The `error` member.
    public let error: Code
    /// The `error_description` member, cleaned of control characters, shortened, and withheld
    /// when it looks like it holds a token or a key.
    public let errorDescription: String?
    /// The HTTP status of the answer.
    public let statusCode: Int
    /// The `Retry-After` header in seconds, sent with 429 and 503.
    public let retryAfter: Int?
    /// Whether the answer's body was an RFC 6749 error object that named ``error``; false when
    /// ``error`` was only guessed from the status (`code(forStatus:)`, not public).
    ///
    /// A proxy's HTML 403 or a web server's 404 page says nothing about the device, so a caller
    /// that would act on what the server said about it (`keyauth reset` forgetting a key the
    /// server "does not know") must check this first.
    public let isFromBody: Bool

    /// Creates an error as the server sent it; the description is sanitized here so that no
    /// caller can print a secret a faulty server echoed.
    ///
    /// - Parameters:
    ///   - error: the `error` code.
    ///   - errorDescription: `error_description`, sanitized here.
    ///   - statusCode: the HTTP status of the answer.
    ///   - retryAfter: the `Retry-After` seconds, when the server sent them.
    ///   - isFromBody: false when `error` was derived from the HTTP status alone.
    public init(
        error: Code, errorDescription: String?, statusCode: Int, retryAfter: Int? = nil, isFromBody: Bool = true
    ) {
        self.error = error
        self.errorDescription = errorDescription.flatMap(Self.sanitized)
        self.statusCode = statusCode
        self.retryAfter = retryAfter
        self.isFromBody = isFromBody
    }

    /// `code: description`, for logs.
    public var description: String {
        guard let errorDescription else { return error.rawValue }
        return "\(error.rawValue): \(errorDescription)"
    }

    /// The code a server that sent no OAuth body most likely meant, from the HTTP status alone
    /// (a proxy's 502 page, an empty 404).
    static func code(forStatus status: Int) -> Code {
        switch status {
        case 401: .invalidToken
        case 403: .accessDenied
        case 404: .notFound
        case 405: .methodNotAllowed
        case 429: .slowDown
        case 503: .temporarilyUnavailable
        case 500...599: .serverError
        default: .invalidRequest
        }
    }

    /// Keeps printable text only, at most 300 characters, and drops the text entirely when it
    /// contains something shaped like a JWT or a PEM block.
    static func sanitized(_ text: String) -> String? {
        if text.contains("-----BEGIN") { return "(withheld: the description contained key material)" }
        // Every run of base64url characters and dots, wherever it stands: a token echoed in
        // quotes, after `assertion=` or inside JSON is no less a token than one between spaces.
        let runs = text.split(whereSeparator: { !isTokenCharacter($0) })
        if runs.contains(where: { looksLikeJWT($0) }) {
            return "(withheld: the description contained a token)"
        }
        var cleaned = String(String.UnicodeScalarView(text.unicodeScalars.map { isUnprintable($0) ? " " : $0 }))
        if cleaned.count > 300 { cleaned = String(cleaned.prefix(300)) + "…" }
        cleaned = cleaned.trimmingSpaces()
        return cleaned.isEmpty ? nil : cleaned
    }

    /// Whether `scalar` must not reach a terminal or a log as it is: a C0 or C1 control (ESC, and
    /// U+009B, which xterm takes as the start of an escape sequence too), DEL, or a format
    /// character (a right-to-left override would reverse the rest of the line).
    package static func isUnprintable(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.properties.generalCategory == .format
    }

    /// Whether `code` can be an `error` code (RFC 6749 section 5.2: printable ASCII but `"` and
    /// `\`), at most 64 characters and not shaped like a token; a server's answer whose code is
    /// not is read as one without an OAuth body, so that its text never reaches a terminal.
    package static func isWellFormedCode(_ code: String) -> Bool {
        guard (1...64).contains(code.utf8.count), !looksLikeJWT(code) else { return false }
        return code.utf8.allSatisfy { (0x20...0x7E).contains($0) && $0 != 0x22 && $0 != 0x5C }
    }

    /// A character of a compact JWS: base64url or the dot between segments.
    private static func isTokenCharacter(_ character: Character) -> Bool {
        guard let ascii = character.asciiValue else { return false }
        return (0x41...0x5A).contains(ascii) || (0x61...0x7A).contains(ascii) || (0x30...0x39).contains(ascii)
            || ascii == 0x2D || ascii == 0x5F || ascii == 0x2E
    }

    /// Three base64url segments separated by dots, long enough to be a signed token.
    static func looksLikeJWT<Text: StringProtocol>(_ word: Text) -> Bool {
        let segments = word.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, word.count >= 40 else { return false }
        return segments.allSatisfy { segment in
            segment.count >= 2
                && segment.unicodeScalars.allSatisfy { scalar in
                    ("A"..."Z").contains(scalar) || ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar)
                        || scalar == "-" || scalar == "_"
                }
        }
    }
}

extension String {
    /// The string without leading and trailing spaces.
    func trimmingSpaces() -> String {
        var scalars = Substring(self)
        while scalars.first == " " { scalars.removeFirst() }
        while scalars.last == " " { scalars.removeLast() }
        return String(scalars)
    }
}
