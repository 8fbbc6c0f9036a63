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

    /// The caller's devices, oldest first.
    func listDevices(of actor: DeviceRecord) throws -> [DeviceRecord] {
        try storage.devices(user: actor.user)
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
    private func ownedDevice(kid: String, actor: DeviceRecord) throws -> DeviceRecord {
        guard InputRules.isValidKID(kid), let device = try storage.device(kid: kid) else {
            throw ServiceError(.notFound, "no such device")
        }
        guard device.user == actor.user else {
            throw ServiceError(.accessDenied, "the device belongs to another user")
        }
        return device
    }
}
