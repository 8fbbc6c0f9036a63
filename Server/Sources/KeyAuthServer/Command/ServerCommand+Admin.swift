import KeyAuth

/// The admin commands (`enroll`, `devices`, `revoke`): the service's own rules on a database the
/// administrator names, without a signing key or a listener.
extension ServerCommand {
    /// `enroll USER`: a one-time enrollment code, on standard output only.
    static func enroll(user: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let code = try EnrollmentCodes(storage: storage).issue(for: user)
            output.error("keyauth-server: one-time enrollment code for \(user), valid 15 minutes:\n")
            output.standard(code + "\n")
        }
    }

    /// `devices`: every device of every user, tab-separated, states as clients see them.
    static func listDevices(database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let registry = DeviceRegistry.administering(storage)
            var lines = ["KID\tUSER\tNAME\tSTATUS\tCREATED\tLAST_LOGIN"]
            for device in try registry.allDevices() {
                lines.append(
                    [
                        device.kid, device.user, device.name, registry.visibleStatus(device).rawValue,
                        RFC3339.string(fromSeconds: device.createdAt),
                        device.lastLoginAt.map(RFC3339.string(fromSeconds:)) ?? "-",
                    ].joined(separator: "\t"))
            }
            output.standard(lines.joined(separator: "\n") + "\n")
        }
    }

    /// `revoke KID`: revokes an active device or denies a pending one, any user's, through the
    /// registry's revocation (the same rule and retry as `DELETE /v1/devices/{kid}`).
    static func revoke(kid: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let revocation: DeviceRegistry.Revocation
            do {
                revocation = try DeviceRegistry.administering(storage).revoke(
                    kid: kid, ownedBy: nil, by: .administrator)
            } catch let error as ServiceError where error.kind == .unknownDevice {
                throw ServerConfigurationError("no device \(kid)")
            }
            switch revocation {
            case .revoked(let device): output.standard("revoked \(kid) (\(device.user))\n")
            case .denied(let device): output.standard("denied \(kid) (\(device.user))\n")
            case .unchanged(let device): output.standard("\(kid) is already \(device.status.rawValue)\n")
            }
        }
    }

    static func withStorage(
        _ database: String, output: Output, _ body: (any ServerStorage) throws -> Void
    ) -> Int32 {
        let storage: any ServerStorage
        do {
            storage = try StorageFactory.open(database, creatingIfMissing: false)
        } catch {
            output.error("keyauth-server: \(error.description)\n")
            return exitStatus(for: error)
        }
        defer { storage.close() }
        do {
            try body(storage)
            return ExitStatus.success
        } catch let error as ServerConfigurationError {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.failure
        } catch let error as StorageError {
            output.error("keyauth-server: \(error.description)\n")
            return ExitStatus.unavailable
        } catch {
            output.error("keyauth-server: \(error)\n")
            return ExitStatus.failure
        }
    }
}

extension DeviceRegistry {
    /// The registry as the admin commands see it: the default device lifetimes (they take no
    /// serve options) and the real clock.
    static func administering(_ storage: any ServerStorage) -> DeviceRegistry {
        DeviceRegistry(
            storage: storage, pendingLifetime: ServerConfiguration.defaultPendingLifetime,
            deviceRetention: ServerConfiguration.defaultDeviceRetention, now: ServerClock.now)
    }
}
