/// A failure the client caused or must act on, named by what happened in the service rather than
/// by HTTP (an unknown path or method is a ``RoutingError``).
///
/// ``HTTPResponse/init(error:)`` (in `HTTPResponse+Error.swift`) is the one place that turns
/// these into status codes and OAuth error codes (PROTOCOL.md section 6).
struct ServiceError: Error, Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        /// Malformed body, missing field, bad user or key format, wrong content type.
        case invalidRequest
        /// A `grant_type` other than the JWT bearer grant.
        case unsupportedGrantType
        /// An assertion (or registration proof) failed a check of section 2.
        case invalidGrant
        /// The device waits for approval.
        case authorizationPending
        /// The device was denied.
        case deviceDenied
        /// The pending registration expired.
        case expiredToken
        /// Missing, bad or expired Bearer token.
        case invalidToken
        /// Enrollment code required or wrong.
        case accessDenied
        /// No such device, or another user's (the same answer, so neither can be probed).
        case unknownDevice
        /// The key is registered to another user.
        case keyConflict
        /// Too many failures from this address, or too many pending devices for the user;
        /// carries the seconds to wait.
        case slowDown(retryAfter: Int)
        /// Work that every client shares is at its bound (``SlowHashGate``): not this client's
        /// fault, so it counts against no budget; carries the seconds to wait.
        case busy(retryAfter: Int)
        /// A DPoP proof is missing or fails a check (RFC 9449): 400 at the token endpoint, 401
        /// at a resource endpoint.
        case invalidDPoPProof(atResource: Bool)
        /// The proof lacks the server's nonce, or carries an old one; carries a fresh nonce for
        /// the `DPoP-Nonce` header.
        case useDPoPNonce(nonce: String, atResource: Bool)
        /// Client authentication failed: no credentials, an unknown client or a wrong secret.
        case invalidClient
        /// A sign-in request names a user with no active device to approve it.
        case unknownUserID
        /// A binding message that is too long or not printable.
        case invalidBindingMessage
        /// A `scope` that is not space-separated RFC 6749 scope tokens, or too long.
        case invalidScope
        /// A client polled for a sign-in request faster than its interval (CIBA section 11):
        /// a 400 `slow_down`, unlike the rate limit's 429.
        case pollTooFast
        /// A sign-in request that is unknown or another user's (the same answer).
        case unknownSignInRequest
        /// A sign-in request that a device already answered.
        case alreadyAnswered
        /// The code typed on the approving device is not the request's (number matching); carries
        /// the attempts left before the request is denied.
        case wrongCode(attemptsLeft: Int)
    }

    let kind: Kind
    /// Text for the client. Never a token, a key, a code or internal detail.
    let description: String

    init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}
