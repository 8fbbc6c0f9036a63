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
        try refuseWhileAnnounced(actor, "make recovery codes")
        _ = try presenceStatement(
            assertion, by: actor, naming: (AuthenticationMethod.recoveryCodesClaim, actor.user),
            missing: "making recovery codes needs a fresh device assertion naming the user (recovery_codes), "
                + "signed after a presence check; an access token alone is not enough")
        return try recoveryCodes.issue(for: actor.user, by: .device(kid: actor.kid), whileActive: actor.kid)
    }

    /// Refuses `action` to a device that a recovery code enrolled while the notice of that enrolment is
    /// open (a day, ``SignInRequests/Settings/noticeLifetime``).
    ///
    /// Denying the notice revokes the device, and nothing it made may outlive that: a new set of codes
    /// (which would also end the user's own), an approval of another device, or an SSH certificate or
    /// an offline host grant would keep whoever used a stolen code in the account, or on its hosts,
    /// after the user said "this was not me". Nor may it revoke, deny or rename the user's other
    /// devices, which could say so. A user with no other device gets no notice, and so no wait.
    ///
    /// - Throws: ``ServiceError`` `.accessDenied` while such a notice names `actor`.
    func refuseWhileAnnounced(_ actor: DeviceRecord, approving request: SignInRequestRecord) throws {
        switch request.kind {
        case .device: try refuseWhileAnnounced(actor, "approve a device")
        case .recoveryCodes: try refuseWhileAnnounced(actor, "make recovery codes")
        default: break
        }
    }

    /// The rule of ``refuseWhileAnnounced(_:approving:)`` for `action`, named in the refusal.
    func refuseWhileAnnounced(_ actor: DeviceRecord, _ action: String) throws {
        guard let notice = try openNotice(of: actor) else { return }
        throw ServiceError(
            .accessDenied,
            "this device was enrolled with a recovery code and cannot \(action) until the notice sent to the user's "
                + "other devices ends at \(RFC3339.string(fromSeconds: notice.expiresAt)), unless one of them "
                + "denies it first")
    }

    /// The open notice of `device`'s enrolment with a recovery code, if any.
    func openNotice(of device: DeviceRecord) throws -> SignInRequestRecord? {
        // A notice is stored with its device, made at the device's time, and lives a day: a
        // device older than that has none open, and most approvers need not read the list. (The
        // minute is for notices of older versions, which were made just after their device.)
        guard now().subtractingSaturating(device.createdAt) <= signIn.settings.noticeLifetime + 60 else { return nil }
        return try signIn.open(for: device.user).first { $0.kind == .recovery && $0.subject == device.kid }
    }
}
