import KeyAuth

/// The device records and the rules that change them (PROTOCOL.md section 5): what a client sees
/// of a device's state, revocation and denial with their retry, approval, and the purge of
/// records past their retention.
///
/// One owner for both ways in: ``KeyAuthService`` uses it for the HTTP API, and the admin
/// commands (`keyauth-server devices` and `revoke`) use it directly, since they need no signing
/// key or verifier and must not create one in the database.
struct DeviceRegistry: Sendable {
    let storage: any ServerStorage
    /// How long a pending device waits for approval before it expires.
    let pendingLifetime: Int64
    /// How long expired pending and denied devices are kept.
    let deviceRetention: Int64
    let now: @Sendable () -> Int64
    /// Told of each revocation, so that the SSH revocation list is rebuilt at its next fetch.
    var revocations = RevocationSignal()

    /// What a revocation did.
    enum Revocation: Sendable, Equatable {
        /// An active device was revoked.
        case revoked(DeviceRecord)
        /// A pending device was denied.
        case denied(DeviceRecord)
        /// The device was already revoked or denied; nothing changed.
        case unchanged(DeviceRecord)
    }

    /// Whether a pending device has waited longer than the pending lifetime.
    func isExpiredPending(_ device: DeviceRecord) -> Bool {
        device.status == .pending && now() >= device.createdAt.addingSaturating(pendingLifetime)
    }

    /// The state a client sees: `expired` for a pending device past its lifetime.
    func visibleStatus(_ device: DeviceRecord) -> DeviceStatus {
        isExpiredPending(device) ? .expired : device.status.status
    }

    /// Revokes an active device or denies a pending one; a device already revoked or denied is
    /// left as it is (revocation is idempotent).
    ///
    /// A concurrent approval can move a pending device to active between the read and the
    /// conditional update; the revocation retries so that it wins.
    /// A change is recorded in the audit trail; an idempotent repeat is not. Revoking also ends
    /// at once every browser session the device approved (the account page's, the OpenID
    /// provider's), whichever way it comes: the device API, the account page or the admin
    /// command; a session's lookup would refuse them anyway, but none should outlive the device.
    /// The change, the sessions' end and the audit entry are one transaction: a failure leaves
    /// the device as it was, for the caller to try again, never revoked without its record.
    /// - Parameters:
    ///   - kid: the device.
    ///   - owner: the user the device must belong to (the caller's, on the HTTP path); nil for
    ///     the administrator, who may revoke any device.
    ///   - actor: who revokes, for the audit trail.
    /// - Throws: ``ServiceError`` `.unknownDevice` for a device that does not exist or belongs
    ///   to another user; ``StorageError``, also when the device kept changing.
    func revoke(kid: String, ownedBy owner: String?, by actor: AuditActor) throws -> Revocation {
        for _ in 0..<3 {
            let target = try device(kid: kid, ownedBy: owner)
            let next: DeviceStatus.Stored
            switch target.status {
            case .active: next = .revoked
            case .pending: next = .denied
            case .denied, .revoked: return .unchanged(target)
            }
            let time = now()
            let audit = AuditEvent(
                time: time, action: next == .revoked ? .revoke : .deny, actor: actor.description, user: target.user,
                subject: kid, detail: target.name)
            // The status, the sessions the device approved and the audit entry: one transaction.
            if try storage.revokeOrDeny(kid: kid, from: target.status, to: next, at: time, audit: audit) {
                if next == .revoked {
                    revocations.signal()
                    // On SQLite, inside a request the update is only in the group commit's open
                    // batch: a revocation list rebuilt now, on another connection, would miss it
                    // and stay cached under the new generation. So the list is outdated again
                    // once the batch is committed (at once outside a scope).
                    let revocations = revocations
                    DurabilityScope.current?.whenDurable { _ in revocations.signal() }
                }
                return target.status == .active ? .revoked(target) : .denied(target)
            }
        }
        throw StorageError(.queryFailed, "the device kept changing during revocation")
    }

    /// Approves a pending device of `owner` (of anyone when nil: the administrator), and records
    /// the approval in the audit trail.
    ///
    /// The approving device (the actor's) must still be active when the approval commits, not
    /// only when its request was authenticated: a revocation that has returned stops it.
    ///
    /// - Returns: the device after approval (approving an active device again is a no-op).
    /// - Throws: ``ServiceError`` `.unknownDevice`, `.expiredToken` for a pending device past its
    ///   lifetime, `.invalidRequest` for a denied or revoked one, `.accessDenied` when the
    ///   approving device was revoked meanwhile; ``StorageError``.
    func approve(kid: String, ownedBy owner: String?, by actor: AuditActor, detail: String? = nil) throws
        -> DeviceRecord
    {
        let target = try device(kid: kid, ownedBy: owner)
        switch target.status {
        case .active:
            return target
        case .pending:
            if isExpiredPending(target) {
                throw ServiceError(.expiredToken, "the registration expired before it was approved")
            }
            let time = now()
            switch try storage.approvePendingDevice(
                kid: kid, approvedBy: actor.deviceKID, at: time,
                createdAfter: time.subtractingSaturating(pendingLifetime))
            {
            case .approved:
                break
            case .approverNotActive:
                throw ServiceError(.accessDenied, "the approving device is no longer active")
            case .notPending:
                // Someone denied (or approved) it first, or it expired since the check above:
                // report what it is now.
                let current = try device(kid: kid, ownedBy: owner)
                if current.status == .pending {
                    throw ServiceError(.expiredToken, "the registration expired before it was approved")
                }
                guard current.status == .active else {
                    throw ServiceError(
                        .invalidRequest, "the device is \(current.status.rawValue) and cannot be approved")
                }
                return current
            }
            try recordApproval(of: target, by: actor, detail: detail)
            return try device(kid: kid, ownedBy: owner)
        case .denied, .revoked:
            throw ServiceError(.invalidRequest, "the device is \(target.status.rawValue) and cannot be approved")
        }
    }

    /// The audit entry of an approval of `device`, with `detail` after its name.
    func recordApproval(of device: DeviceRecord, by actor: AuditActor, detail: String?) throws {
        try audit.record(
            .approve, by: actor, user: device.user, subject: device.kid,
            detail: detail.map { "\(device.name), \($0)" } ?? device.name)
    }

    /// Gives a device of `owner` a new name, checked with the registration's rule and stored in
    /// the NFC form that rule returns.
    ///
    /// A device waiting for approval keeps the name it registered with: the approving device
    /// shows that name beside the prompt for the code, and a session that pressed Approve could
    /// otherwise rename the device to read as the code it was shown ("phone (code 57)").
    ///
    /// - Throws: ``ServiceError`` `.unknownDevice`, `.invalidRequest` for a name the rule
    ///   refuses or a pending device; ``StorageError``.
    func rename(kid: String, ownedBy owner: String, to newName: String) throws {
        let name: String
        do {
            name = try NameRule.deviceName.normalize(newName)
        } catch {
            throw ServiceError(.invalidRequest, "the device name \(error)")
        }
        guard try device(kid: kid, ownedBy: owner).status != .pending else {
            throw ServiceError(
                .invalidRequest, "a device waiting for approval keeps the name it registered with; approve it first")
        }
        guard try storage.renameDevice(kid: kid, name: name) else {
            throw ServiceError(.unknownDevice, "no such device")
        }
    }

    /// The device `kid`, which must belong to `owner` when one is given.
    ///
    /// Another user's device gets the same answer as an unknown one: a distinct answer would let
    /// any user with a token find out which keys are registered, and to whom they do not belong.
    func device(kid: String, ownedBy owner: String?) throws -> DeviceRecord {
        guard InputRules.isValidKeyID(kid), let device = try storage.device(kid: kid),
            owner == nil || device.user == owner
        else { throw ServiceError(.unknownDevice, "no such device") }
        return device
    }

    /// Every device of `user`, for the account page, oldest first.
    func devices(ofUser user: String) throws(StorageError) -> [DeviceRecord] {
        try storage.devices(user: user)
    }

    /// Where this registry's changes are recorded.
    var audit: AuditTrail { AuditTrail(storage: storage, now: now) }

    /// Every device of every user, for the administrator, ordered by user then age.
    func allDevices() throws(StorageError) -> [DeviceRecord] {
        try storage.allDevices()
    }

    /// Deletes pending devices whose pending lifetime ended, and denied devices denied, more
    /// than the retention period ago (24 hours by default); returns how many.
    ///
    /// Until then their clients still learn what happened (`expired_token`, `access_denied`);
    /// after, the records would only fill the user's list. Revoked devices stay as history.
    ///
    /// - Parameter time: the database's time (the cleanup's), so that an instance whose clock
    ///   ran ahead deletes nothing the others still need.
    @discardableResult
    func purgeStale(now time: Int64) throws(StorageError) -> Int {
        let deniedBefore = time.subtractingSaturating(deviceRetention)
        return try storage.purgeDevices(
            pendingCreatedBefore: deniedBefore.subtractingSaturating(pendingLifetime), deniedBefore: deniedBefore)
    }
}
