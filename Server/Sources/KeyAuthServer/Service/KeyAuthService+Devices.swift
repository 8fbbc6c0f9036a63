import KeyAuth

extension KeyAuthService {
    /// Checks a request's access token and its binding (``checkAccessToken(authorization:proof:method:path:)``)
    /// and that the device it names (`cnf.jkt`, or `client_id` for a Bearer token) is still an
    /// active device of the token's user, so revoking a device also ends its tokens at once.
    ///
    /// - Returns: the acting device.
    func authenticate(authorization: String?, proof: String?, method: String, path: String) throws -> DeviceRecord {
        let claims = try checkAccessToken(authorization: authorization, proof: proof, method: method, path: path)
        guard let device = try storage.device(kid: claims.deviceKeyID), device.status == .active,
            device.user == claims.user
        else { throw ServiceError(.invalidToken, "the access token is not valid") }
        return device
    }

    /// One page of the caller's devices, oldest first, after `position`.
    ///
    /// - Returns: at most `limit` devices, and the position to continue from when more remain.
    func listDevices(
        of actor: DeviceRecord, after position: DeviceListPosition, limit: Int
    ) throws -> (devices: [DeviceRecord], next: DeviceListPosition?) {
        // One more than asked for tells whether another page exists without a count query.
        var devices = try storage.devices(user: actor.user, after: position, limit: limit + 1)
        guard devices.count > limit else { return (devices, nil) }
        devices.removeLast(devices.count - limit)
        return (devices, devices.last?.listPosition)
    }

    /// Approves a pending device of the caller's user (PROTOCOL.md section 4, "Approve").
    ///
    /// The approval needs what approving a sign-in needs: a fresh assertion of the caller's own
    /// device, after a presence check (PIN, TPM authorization, PAM), naming the pending device
    /// (``DeviceStatement``). A copied access token alone (15 minutes, Bearer) could otherwise
    /// enrol an attacker's key for good.
    ///
    /// - Returns: the device after approval (approving an active device again is a no-op).
    /// - Throws: ``ServiceError`` `.invalidRequest` without an assertion; `.invalidGrant` for an
    ///   assertion that fails a check; what ``DeviceRegistry/approve(kid:ownedBy:by:detail:)``
    ///   throws.
    func approve(kid: String, assertion: String?, by actor: DeviceRecord) throws -> DeviceRecord {
        // The device first: another user's gets the answer of an unknown one, whatever is sent.
        let target = try registry.device(kid: kid, ownedBy: actor.user)
        try refuseWhileAnnounced(actor, "approve a device")
        _ = try presenceStatement(
            assertion, by: actor, naming: (AuthenticationMethod.approvedDeviceClaim, target.kid),
            missing: "approving a device needs a fresh device assertion naming it (approve_kid), signed after a "
                + "presence check; an access token alone is not enough")
        return try registry.approve(kid: kid, ownedBy: actor.user, by: .device(kid: actor.kid))
    }

    /// Revokes an active device or denies a pending one of `user`; already revoked or denied
    /// devices are left as they are (DELETE is idempotent).
    ///
    /// Every way a user revokes comes here: the device API, the denial of a recovery notice and
    /// the account page. The administrator's command goes to the registry itself.
    ///
    /// - Parameter actor: a device acting through the API, or the account page in a session a
    ///   device approved. A device may always revoke itself; another device only once no
    ///   recovery notice names the acting device (``refuseWhileAnnounced(_:_:)``): whoever used a
    ///   stolen recovery code would otherwise revoke the devices that could deny its notice, and
    ///   keep the account.
    func revoke(kid: String, ownedBy user: String, by actor: AuditActor) throws {
        try refuseWhileAnnounced(actor, changing: kid, "revoke or deny another device")
        _ = try registry.revoke(kid: kid, ownedBy: user, by: actor)
    }

    /// Gives a device of `user` a new name (``DeviceRegistry/rename(kid:ownedBy:to:)``), under
    /// ``revoke(kid:ownedBy:by:)``'s rule: a name is what the user reads before denying a notice.
    func rename(kid: String, ownedBy user: String, to name: String, by actor: AuditActor) throws {
        try refuseWhileAnnounced(actor, changing: kid, "rename another device")
        try registry.rename(kid: kid, ownedBy: user, to: name)
    }

    /// ``refuseWhileAnnounced(_:_:)`` for the device `actor` acts for (``AuditActor/deviceKID``),
    /// when it changes another device `kid`.
    private func refuseWhileAnnounced(_ actor: AuditActor, changing kid: String, _ action: String) throws {
        guard let acting = actor.deviceKID, acting != kid, let device = try storage.device(kid: acting) else { return }
        try refuseWhileAnnounced(device, action)
    }

    /// Approves the account page's request to add `device`, and the device with it, in one
    /// transaction: the approval is the user's answer to "approve this device?", and it is used
    /// up by the activation. A device that cannot be activated leaves the request pending.
    func approveDevice(
        _ device: DeviceRecord, on request: SignInRequestRecord, by actor: DeviceRecord, methods: [String],
        askingSession: [UInt8]?
    ) throws {
        let time = now()
        switch try storage.approveDeviceSignInRequest(
            id: request.id, device: device.kid, answeringKID: actor.kid, methods: methods, at: time,
            askingSession: askingSession, createdAfter: time.subtractingSaturating(registry.pendingLifetime))
        {
        case .approved:
            try auditAnswer(request, approved: true, by: actor, detail: nil)
            try registry.recordApproval(
                of: device, by: .device(kid: actor.kid), detail: "on the account page's request")
        case .alreadyActive:
            try auditAnswer(request, approved: true, by: actor, detail: nil)
        case .requestNotOpen:
            throw try answeredMeanwhile(request, by: actor, approving: true)
        case .deviceNotPending:
            // Still pending, it was not denied: its pending lifetime ended since the check.
            if try storage.device(kid: device.kid)?.status == .pending { throw Self.registrationExpired }
            throw Self.deviceNoLongerPending
        case .approverNotActive:
            throw ServiceError(.accessDenied, "the approving device is no longer active")
        }
    }

    /// The pending device a `device` request approves, still pending and the user's. (An
    /// approval given another way ends the request; one given while this approval runs is the
    /// storage's `.alreadyActive`, and the answer stands.)
    ///
    /// - Throws: ``ServiceError`` `.expiredToken` when its registration expired before this
    ///   approval; `.invalidRequest` when it is no longer pending.
    func pendingSubject(of request: SignInRequestRecord) throws -> DeviceRecord {
        guard let kid = request.subject, let device = try storage.device(kid: kid), device.user == request.user,
            device.status == .pending
        else { throw Self.deviceNoLongerPending }
        guard !isExpiredPending(device) else { throw Self.registrationExpired }
        return device
    }

    private static let deviceNoLongerPending = ServiceError(
        .invalidRequest, "the device to approve is no longer waiting for approval")
    private static let registrationExpired = ServiceError(
        .expiredToken, "the registration expired before it was approved")
}
