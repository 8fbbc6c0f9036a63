import KeyAuth

/// What the administrator does beyond a user's own rights (`keyauth-server devices`, `approve`,
/// `revoke`, `users`, `delete-user`): any user's devices, found by a key ID prefix, and whole
/// users. The state changes go through the same ``approve(kid:ownedBy:by:)`` and
/// ``revoke(kid:ownedBy:by:)`` as the HTTP API's.
extension DeviceRegistry {
    /// The fewest characters of a key ID prefix the admin commands accept: 48 bits of a SHA-256
    /// fingerprint, so that a typed prefix names one device in any realistic registry.
    static let minimumPrefixLength = 8

    /// What a key ID or prefix names.
    enum PrefixMatch: Sendable, Equatable {
        case device(DeviceRecord)
        case none
        /// More than one device starts with the prefix: the caller lists them.
        case ambiguous([DeviceRecord])
    }

    /// The device whose key ID is `text`, or the only one that starts with it.
    ///
    /// - Throws: ``ServerConfigurationError`` for a prefix shorter than
    ///   ``minimumPrefixLength`` that is not a whole key ID; ``StorageError``.
    func device(matching text: String) throws -> PrefixMatch {
        if InputRules.isValidKeyID(text), let exact = try storage.device(kid: text) { return .device(exact) }
        guard text.count >= Self.minimumPrefixLength else {
            throw ServerConfigurationError(
                "a key ID prefix needs at least \(Self.minimumPrefixLength) characters, got \(text)")
        }
        let matches = try storage.allDevices().filter { $0.kid.hasPrefix(text) }
        switch matches.count {
        case 0: return .none
        case 1: return .device(matches[0])
        default: return .ambiguous(matches)
        }
    }

    /// One user as `keyauth-server users` shows it.
    struct UserSummary: Sendable, Equatable {
        let user: String
        /// Devices by the state a client sees (`expired` for pending past its lifetime).
        let counts: [DeviceStatus: Int]
        /// The latest login of any of the user's devices.
        let lastLoginAt: Int64?
    }

    /// Every user with a device record, by name, with their devices counted by state.
    func users() throws(StorageError) -> [UserSummary] {
        let byUser = Dictionary(grouping: try storage.allDevices(), by: \.user)
        return byUser.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map { user in
            let devices = byUser[user] ?? []
            var counts: [DeviceStatus: Int] = [:]
            for device in devices { counts[visibleStatus(device), default: 0] += 1 }
            return UserSummary(user: user, counts: counts, lastLoginAt: devices.compactMap(\.lastLoginAt).max())
        }
    }

    /// Revokes every active device and denies every pending one of `user` (each recorded in the
    /// audit trail as the HTTP API's revocations are), then deletes the user's devices and
    /// enrollment codes, and records the deletion.
    ///
    /// Revoking first means a device whose record somehow survived would still be revoked, and
    /// the audit trail names every device the user lost. The user is then unknown to the
    /// server: the name needs a new enrollment code (or, under open enrollment, is anyone's).
    /// The deleted devices' keys stay in the SSH revocation list for
    /// ``SSHCertificateIssuer/revocationRetention`` seconds, until their last certificate has
    /// expired: the list is otherwise built from device records, and would drop them.
    /// - Returns: how many devices and codes were deleted.
    /// - Throws: ``ServiceError`` `.unknownDevice` when the user has no device and no code;
    ///   ``StorageError``.
    func deleteUser(_ user: String) throws -> (devices: Int, codes: Int) {
        for device in try storage.devices(user: user) where device.status == .active || device.status == .pending {
            _ = try revoke(kid: device.kid, ownedBy: user, by: .administrator)
        }
        let deleted = try storage.deleteUser(
            user, listingSSHKeysUntil: now().addingSaturating(SSHCertificateIssuer.revocationRetention))
        guard deleted.devices + deleted.codes > 0 else {
            throw ServiceError(.unknownDevice, "no user \(user)")
        }
        try audit.record(
            .deleteUser, by: .administrator, user: user,
            detail: "\(deleted.devices) devices, \(deleted.codes) codes")
        return deleted
    }
}
