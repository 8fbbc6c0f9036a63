import KeyAuth

/// What an approving device signed: a fresh device assertion with the name of what it approves.
struct DeviceStatement: Sendable {
    /// The assertion's verified claims.
    let claims: JWTClaims
    /// How the device says it checked the user (RFC 8176 `amr` values).
    let methods: [String]
}

extension KeyAuthService {
    /// Checks an assertion that approves something on behalf of the caller's device (a sign-in
    /// request, a new device): every login check of section 2 (its `jti` claimed in the same
    /// replay cache once its signature verifies, whatever is refused after), signed by `actor` itself while active, naming what it approves in the claim
    /// `naming.claim`, with a valid `amr` statement, and, where `requiringPresence`, one that
    /// includes a presence check (`pin` or `user`).
    ///
    /// An access token proves only that someone holds a copy of it for a few minutes; this
    /// proves the device key was used now, after the device checked its user.
    ///
    /// - Throws: ``ServiceError`` `.invalidGrant` naming the failed rule (the uniform failure for
    ///   an unknown key or a bad signature); ``StorageError``.
    func deviceStatement(
        _ assertion: String, by actor: DeviceRecord, naming: (claim: String, value: String), requiringPresence: Bool
    ) throws -> DeviceStatement {
        let parsed = try parseAssertion(assertion)
        let stored = try storage.device(kid: parsed.keyID)
        let (key, device) = try loginKeys.key(for: stored, signature: parsed.signature)
        let verified = try verifyAssertion(parsed, key: key)
        guard let device else { throw ServiceError(.invalidGrant, DeviceAssertionVerifier.uniformFailure) }
        // Used up before the checks of what it states: a statement refused here (another device's,
        // naming something else, without presence) is still a valid login of its device, and
        // whoever saw it could log in with it.
        try claimJWTID(of: verified)
        guard device.kid == actor.kid, device.status == .active else {
            throw ServiceError(.invalidGrant, "the assertion must be signed by the device that answers")
        }
        guard (try? verified.claims.string(naming.claim)) == naming.value else {
            throw ServiceError(.invalidGrant, "the assertion does not name what it approves (\(naming.claim))")
        }
        guard let methods = try? verified.claims.strings("amr"), AuthenticationMethod.isValidStatement(methods)
        else {
            throw ServiceError(
                .invalidGrant, "the assertion must state amr: hwk or swk, and at most one of pin or user")
        }
        if requiringPresence, !methods.contains(where: AuthenticationMethod.presenceChecks.contains) {
            throw ServiceError(
                .invalidGrant,
                "approving a device or a login to a host, or making recovery codes, needs a presence check on the "
                    + "device (amr pin or user): a device registered with --presence none can do none of them")
        }
        return DeviceStatement(claims: verified.claims, methods: methods)
    }

    /// ``deviceStatement(_:by:naming:requiringPresence:)`` with a presence check, for an action
    /// that lets a key in for good (approving a device, making recovery codes).
    ///
    /// - Parameter missing: the description of the 400 `invalid_request` when no assertion came.
    func presenceStatement(
        _ assertion: String?, by actor: DeviceRecord, naming: (claim: String, value: String), missing: String
    ) throws -> DeviceStatement {
        guard let assertion, !assertion.isEmpty else { throw ServiceError(.invalidRequest, missing) }
        return try deviceStatement(assertion, by: actor, naming: naming, requiringPresence: true)
    }
}
