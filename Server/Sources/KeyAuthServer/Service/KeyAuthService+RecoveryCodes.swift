import KeyAuth

extension KeyAuthService {
    /// Makes a new set of recovery codes for the caller's user, replacing the old set
    /// (PROTOCOL.md section 4, "Recovery codes").
    ///
    /// The codes can enrol a device without anyone's approval, so asking for them needs what
    /// approving a device needs: a fresh assertion of the caller's own device, after a presence
    /// check, naming the user in `recovery_codes` (``DeviceStatement``). A copied access token
    /// alone could otherwise take the account for good.
    ///
    /// - Returns: the codes, shown once.
    /// - Throws: ``ServiceError`` `.invalidRequest` without an assertion; `.invalidGrant` for one
    ///   that fails a check; `.accessDenied` when the device was revoked before the new set was
    ///   stored; ``StorageError``.
    func makeRecoveryCodes(assertion: String?, by actor: DeviceRecord) throws -> [String] {
        _ = try presenceStatement(
            assertion, by: actor, naming: (AuthenticationMethod.recoveryCodesClaim, actor.user),
            missing: "making recovery codes needs a fresh device assertion naming the user (recovery_codes), "
                + "signed after a presence check; an access token alone is not enough")
        return try recoveryCodes.issue(for: actor.user, by: .device(kid: actor.kid), whileActive: actor.kid)
    }
}
