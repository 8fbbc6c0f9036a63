import KeyAuth

extension KeyAuthService {
    /// Checks a Bearer token and that the device it names (`cnf.jkt`) is still an active device
    /// of the token's user, so revoking a device also ends its tokens at once.
    ///
    /// - Returns: the acting device.
    func authenticate(bearer token: String) throws -> DeviceRecord {
        let subject = try tokens.verify(token)
        guard let device = try storage.device(kid: subject.deviceKID), device.status == .active,
            device.user == subject.user
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

    /// Approves a pending device of the caller's user.
    ///
    /// - Returns: the device after approval (approving an active device again is a no-op).
    func approve(kid: String, by actor: DeviceRecord) throws -> DeviceRecord {
        let target = try ownedDevice(kid: kid, actor: actor)
        switch target.status {
        case .active:
            return target
        case .pending:
            if isExpiredPending(target) {
                throw ServiceError(.expiredToken, "the registration expired before it was approved")
            }
            guard try storage.updateStatus(kid: kid, from: .pending, to: .active, at: now()) else {
                // Someone denied (or approved) it first: report what it is now.
                return try approveAfterRace(kid: kid, actor: actor)
            }
            return try ownedDevice(kid: kid, actor: actor)
        case .denied, .revoked:
            throw ServiceError(.invalidRequest, "the device is \(target.status.rawValue) and cannot be approved")
        }
    }

    private func approveAfterRace(kid: String, actor: DeviceRecord) throws -> DeviceRecord {
        let current = try ownedDevice(kid: kid, actor: actor)
        guard current.status == .active else {
            throw ServiceError(.invalidRequest, "the device is \(current.status.rawValue) and cannot be approved")
        }
        return current
    }

    /// Revokes an active device or denies a pending one; already revoked or denied devices are
    /// left as they are (DELETE is idempotent).
    func revoke(kid: String, by actor: DeviceRecord) throws {
        // A concurrent approval can move a pending device to active between the read and the
        // conditional update; retry so that the revocation wins.
        for _ in 0..<3 {
            let target = try ownedDevice(kid: kid, actor: actor)
            let next: DeviceStatus
            switch target.status {
            case .active: next = .revoked
            case .pending: next = .denied
            case .denied, .revoked: return
            }
            if try storage.updateStatus(kid: kid, from: target.status, to: next, at: now()) { return }
        }
        throw StorageError(.queryFailed, "the device kept changing during revocation")
    }

    /// The device `kid`, which must belong to the actor's user.
    ///
    /// Another user's device gets the same 404 as an unknown one: a distinct answer would let
    /// any user with a token find out which keys are registered, and to whom they do not belong.
    private func ownedDevice(kid: String, actor: DeviceRecord) throws -> DeviceRecord {
        guard InputRules.isValidKeyID(kid), let device = try storage.device(kid: kid), device.user == actor.user else {
            throw ServiceError(.notFound, "no such device")
        }
        return device
    }

    /// Deletes pending devices whose pending lifetime ended, and denied devices denied, more
    /// than the retention period ago (24 hours by default); returns how many.
    ///
    /// Until then their clients still learn what happened (`expired_token`, `access_denied`);
    /// after, the records would only fill the user's list. Revoked devices stay as history.
    @discardableResult
    func purgeStaleDevices() throws(StorageError) -> Int {
        let time = now()
        return try storage.purgeDevices(
            pendingCreatedBefore: time - settings.pendingLifetime - settings.deviceRetention,
            deniedBefore: time - settings.deviceRetention)
    }
}
