/// The one error type of the KeyAuth library.
///
/// Callers switch on ``code``, which is stable across releases and extensible without breaking
/// them (a struct, not an enum). ``message`` is for people: it names files and reasons but never
/// holds a PIN, a token, or key material.
public struct KeyAuthError: Error, Sendable, CustomStringConvertible {
    /// A stable, machine-readable error code.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No device key exists yet (register first).
        public static let keyNotFound = Code(rawValue: "key_not_found")
        /// A device key already exists where a new one would be created.
        public static let keyExists = Code(rawValue: "key_exists")
        /// The key file is readable by others, is a symlink, or belongs to another user.
        public static let keyUnprotected = Code(rawValue: "key_unprotected")
        /// The key file is truncated, not PEM, or not an RSA key.
        public static let keyCorrupt = Code(rawValue: "key_corrupt")
        /// A key does not meet the policy (size, exponent, private where public is expected).
        public static let keyRejected = Code(rawValue: "key_rejected")
        /// The user did not prove presence (PAM refused, prompt cancelled).
        public static let presenceDenied = Code(rawValue: "presence_denied")
        /// The presence check cannot run here (no terminal, no PAM service).
        public static let presenceUnavailable = Code(rawValue: "presence_unavailable")
        /// The PIN does not decrypt the key.
        public static let wrongPIN = Code(rawValue: "wrong_pin")
        /// An encrypted key was given where an unencrypted one is read (no PIN was offered).
        public static let keyEncrypted = Code(rawValue: "key_encrypted")
        /// Too many wrong PINs: wait before the next attempt.
        public static let lockedOut = Code(rawValue: "locked_out")
        /// A token is not a well-formed compact JWS.
        public static let tokenMalformed = Code(rawValue: "token_malformed")
        /// A signature does not verify (or the key is unknown).
        public static let signatureInvalid = Code(rawValue: "signature_invalid")
        /// A claim or header fails a check (expired, audience, replay, algorithm).
        public static let claimInvalid = Code(rawValue: "claim_invalid")
        /// The server answered with an OAuth error.
        public static let serverRejected = Code(rawValue: "server_rejected")
        /// The server could not be reached or timed out.
        public static let transportFailed = Code(rawValue: "transport_failed")
        /// The device is registered but waits for approval from another device.
        public static let approvalPending = Code(rawValue: "approval_pending")
        /// The server already holds this key, as a device that was denied, revoked or expired: it will
        /// never log in, so the key is of no further use and can be forgotten. A registration
        /// sent again (``Authenticator/Configuration-swift.struct/registerStoredKey``) learns so
        /// from the server's record.
        public static let registrationEnded = Code(rawValue: "registration_ended")
        /// Reading or writing local state failed (disk full, permissions, I/O).
        public static let storageFailed = Code(rawValue: "storage_failed")
        /// OpenSSL failed for a reason that is not the caller's input.
        public static let cryptoFailed = Code(rawValue: "crypto_failed")
        /// An argument is outside what the API accepts.
        public static let invalidArgument = Code(rawValue: "invalid_argument")
        /// The operation was cancelled.
        public static let cancelled = Code(rawValue: "cancelled")
        /// A DPoP proof (RFC 9449) is missing, malformed, or fails a check: another method,
        /// URL, key or access token, a replay, a time outside the window. Resource servers answer
        /// it with 401 and `WWW-Authenticate: DPoP error="invalid_dpop_proof"`.
        public static let dpopProofInvalid = Code(rawValue: "invalid_dpop_proof")
        /// The DPoP proof lacks the nonce the server requires, or carries an old one: send it
        /// again with the nonce of the `DPoP-Nonce` header (`use_dpop_nonce`, RFC 9449 section 8).
        public static let dpopNonceRequired = Code(rawValue: "use_dpop_nonce")
        /// The issuer's JWK set cannot be fetched and no cached copy is recent enough to use.
        public static let keySetUnavailable = Code(rawValue: "key_set_unavailable")
        /// A valid access token whose device does not meet the verifier's ``DeviceRequirement``
        /// (a key file where a TPM is required). RFC 9470's error: a service answers 401 with
        /// `WWW-Authenticate: Bearer error="insufficient_user_authentication"`.
        public static let insufficientUserAuthentication = Code(rawValue: "insufficient_user_authentication")
        /// An application's hook (``AuthenticatorHooks``) failed with an error of its own, kept
        /// as ``KeyAuthError/underlying``: the app's network failure is not a server refusal.
        public static let hookFailed = Code(rawValue: "hook_failed")
    }

    /// What went wrong, for programs.
    public let code: Code
    /// What went wrong, for people. Never holds secrets.
    public let message: String
    /// The error from a lower layer, when there is one (an OpenSSL, PAM, or I/O failure).
    public let underlying: (any Error & Sendable)?
    /// Seconds until the next attempt is allowed: for ``Code-swift.struct/lockedOut`` (nil for a
    /// TPM lockout that only its owner lifts), and for the ``Code-swift.struct/wrongPIN`` that
    /// starts such a wait; nil for a wrong PIN that may be tried again at once.
    public let retryAfter: Int?

    public init(
        _ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil, retryAfter: Int? = nil
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.retryAfter = retryAfter
    }

    public var description: String { message }
}

/// An error from a C library, carrying its native code and text.
public struct NativeError: Error, Sendable, CustomStringConvertible {
    /// Which library: "openssl", "pam", "errno".
    public let library: String
    /// The library's own code (`ERR_get_error`, a PAM return value, `errno`).
    public let code: Int
    /// The library's own text for the code.
    public let text: String

    public init(library: String, code: Int, text: String) {
        self.library = library
        self.code = code
        self.text = text
    }

    public var description: String { "\(library) error \(code): \(text)" }
}
