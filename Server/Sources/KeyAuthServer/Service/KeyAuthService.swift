import KeyAuth

/// The server's behaviour, free of HTTP: registration, login, device management and the
/// housekeeping of its storage.
///
/// Each operation takes parsed input and returns a result or throws ``ServiceError`` (the
/// client's problem), ``StorageError`` (503) or anything else (500). The responder turns those
/// into HTTP; the admin commands call the same operations; tests may call them directly.
///
/// A class: the endpoints and grants share one service, and a struct of this many references
/// was copied (every reference retained and released) on each login's way through them.
final class KeyAuthService: Sendable {
    /// The settings the operations depend on.
    struct Settings: Sendable {
        var issuer: String
        var enrollment: EnrollmentMode
        var maximumPendingDevices: Int
        var accessTokenLifetime: Int64
        /// `--offline-grant-lifetime`: the lifetime of a host login's offline grant.
        var offlineGrantLifetime: Int64 = 604_800
        /// `--dpop` and `--dpop-nonce`.
        var dpop = DPoPSettings()
        /// Attested registration (`--tpm-ca`); nil where a test composes a service without it.
        var attestation: AttestationSettings? = nil
        /// `--device-policy` and `--device-policy-mode`.
        var devicePolicy = DevicePolicy()
        /// Where the policy's refusals, and those `monitor` let through, are reported.
        var devicePolicyReporter = DevicePolicyReporter.silent
    }

    let settings: Settings
    /// The device records and their rules.
    let registry: DeviceRegistry
    let tokens: AccessTokens
    let enrollmentCodes: EnrollmentCodes
    /// The users' own one-time codes for enrolling a device when every device is lost.
    let recoveryCodes: RecoveryCodes
    /// The checks of PROTOCOL.md section 2, for logins and registration proofs; one per server.
    let assertions: DeviceAssertionVerifier
    /// The keys logins are verified with: registered ones, or decoys.
    let loginKeys: LoginKeys
    /// Sign-in requests waiting for a device's approval.
    let signIn: SignInRequests
    /// The client applications that may start them.
    let clients: ClientRegistry
    /// Where the `jti` of accepted assertions and DPoP proofs is remembered (`--replay-cache`).
    let replay: ReplayGuard
    /// Whether this server's clock still agrees with the database's (PostgreSQL), as each
    /// cleanup reads it.
    let clockSkew = ClockSkewMonitor()

    init(
        settings: Settings, registry: DeviceRegistry, tokens: AccessTokens, enrollmentCodes: EnrollmentCodes,
        recoveryCodes: RecoveryCodes, assertions: DeviceAssertionVerifier, loginKeys: LoginKeys,
        signIn: SignInRequests, clients: ClientRegistry, replay: ReplayGuard = ReplayGuard()
    ) {
        self.settings = settings
        self.registry = registry
        self.tokens = tokens
        self.enrollmentCodes = enrollmentCodes
        self.recoveryCodes = recoveryCodes
        self.assertions = assertions
        self.loginKeys = loginKeys
        self.signIn = signIn
        self.clients = clients
        self.replay = replay
    }

    /// The store behind the registry.
    var storage: any ServerStorage { registry.storage }
    /// The clock, in seconds since 1970.
    var now: @Sendable () -> Int64 { registry.now }

    /// Whether a pending device has waited longer than the pending lifetime.
    func isExpiredPending(_ device: DeviceRecord) -> Bool {
        registry.isExpiredPending(device)
    }

    /// The state a client sees: `expired` for a pending device past its lifetime.
    func visibleStatus(_ device: DeviceRecord) -> DeviceStatus {
        registry.visibleStatus(device)
    }

    /// Checks an assertion's structure and header (``DeviceAssertionVerifier/parse(_:)``).
    ///
    /// - Throws: ``ServiceError`` `.invalidGrant` (see ``invalidGrant(_:)``).
    func parseAssertion(_ assertion: String) throws(ServiceError) -> ParsedDeviceAssertion {
        do {
            return try assertions.parse(assertion)
        } catch {
            throw Self.invalidGrant(error)
        }
    }

    /// Verifies an assertion's signature with `key` and its claims.
    ///
    /// - Throws: ``ServiceError`` `.invalidGrant` (see ``invalidGrant(_:)``).
    func verifyAssertion(_ assertion: ParsedDeviceAssertion, key: RSAPublicKey) throws(ServiceError) -> VerifiedJWT {
        do {
            return try assertions.verify(assertion, key: key)
        } catch {
            throw Self.invalidGrant(error)
        }
    }

    /// Records the assertion's `jti` (rule 7) in the replay cache (``ReplayGuard``), so that a
    /// replay is refused across restarts and, in database mode, across instances.
    ///
    /// - Throws: ``ServiceError`` `.invalidGrant` for a replay, or for an assertion issued before
    ///   a restart after a crash; ``StorageError``.
    func claimJWTID(of assertion: VerifiedJWT) throws {
        // The verifier accepts the assertion until exp + leeway, so its jti is kept that long.
        let time = now()
        let claim = try replay.claim(
            keyID: assertion.keyID, jti: assertion.jwtID, issuedAt: assertion.issuedAt,
            expiresAt: assertion.expiresAt.addingSaturating(DeviceAssertionVerifier.leeway), storage: storage,
            now: time)
        switch claim {
        case .accepted:
            return
        case .replayed:
            throw Self.invalidGrant(KeyAuthError(.claimInvalid, "the assertion was already used"))
        case .issuedBeforeRestart:
            throw Self.invalidGrant(KeyAuthError(.claimInvalid, restartRefusal("assertion", now: time)))
        case .forgotten:
            throw Self.invalidGrant(KeyAuthError(.claimInvalid, forgottenRefusal("assertion")))
        }
    }

    /// Why a token that expires before the claims the server remembers is refused.
    func forgottenRefusal(_ token: String) -> String {
        "the \(token) expires before \(RFC3339.string(fromSeconds: replay.forgetsBefore)), and this server's clock "
            + "was set back past the uses it remembers: it refuses tokens that expire before then"
    }

    /// Why a token issued before a restart after a crash is refused, and when to sign anew.
    func restartRefusal(_ token: String, now time: Int64) -> String {
        let wait = replay.secondsUntilPastHorizon(now: time)
        return "the \(token) was issued before the server restarted after a crash; "
            + (wait > 0 ? "sign a new one in \(wait) s" : "sign a new one")
    }

    /// A verification failure as `invalid_grant`: unknown key, bad signature and revoked key
    /// share one description (the verifier's uniform text); other failures say which rule
    /// failed, never echoing the token.
    static func invalidGrant(_ error: KeyAuthError) -> ServiceError {
        let description =
            error.code == .signatureInvalid
            ? DeviceAssertionVerifier.uniformFailure : "the assertion is not valid: \(error.message)"
        return ServiceError(.invalidGrant, description)
    }
}
