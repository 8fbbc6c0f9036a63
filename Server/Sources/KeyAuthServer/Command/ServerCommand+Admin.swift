import KeyAuth

/// The admin commands (`enroll`, `devices`, `revoke`, `clients`): the service's own rules on a database the
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
                revocation = try DeviceRegistry.administering(storage).revoke(kid: kid, ownedBy: nil)
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

    /// `keys list` and `keys rotate`: the signing keys with their states, or a new key that
    /// signs after the publication delay. With a signing key file there is nothing to rotate.
    static func keys(_ action: KeysAction, options: KeysOptions, output: Output) -> Int32 {
        if let file = options.signingKeyFile {
            guard action == .list else {
                output.error(
                    "keyauth-server: the server signs with --signing-key-file \(file), which does not rotate: "
                        + "put a new key in the file and restart the servers to change it\n")
                return ExitStatus.failure
            }
            output.error(
                "keyauth-server: the server signs with --signing-key-file \(file); the keys stored in the "
                    + "database below are not used\n")
        }
        return withStorage(options.database, output: output) { storage in
            let rotation = SigningKeyRotation(
                storage: storage, tokenLifetime: options.tokenLifetime, now: ServerClock.now)
            switch action {
            case .list:
                var lines = ["KID\tALG\tSTATE\tCREATED\tSIGNS_FROM\tRETIRES"]
                for key in try rotation.list() {
                    lines.append(
                        [
                            key.kid, key.algorithm.rawValue, Self.stateName(key.state),
                            RFC3339.string(fromSeconds: key.createdAt), RFC3339.string(fromSeconds: key.activeFrom),
                            key.retiresAt.map(RFC3339.string(fromSeconds:)) ?? "-",
                        ].joined(separator: "\t"))
                }
                output.standard(lines.joined(separator: "\n") + "\n")
            case .rotate(let requested, let delay):
                let algorithm = try requested ?? rotation.currentAlgorithm() ?? .rs256
                let (kid, activeFrom) = try rotation.rotate(to: algorithm, delay: delay)
                output.standard("\(kid)\n")
                output.error(
                    "keyauth-server: new \(algorithm.rawValue) signing key \(kid) is published now and signs from "
                        + "\(RFC3339.string(fromSeconds: activeFrom)) (in \(delay) s); the current key stays published "
                        + "until its last token has expired\n")
            }
        }
    }

    /// `clients add NAME | list | remove ID`: the client applications that may ask users to
    /// approve a sign-in. `add` prints the `client_id` and the `client_secret` on standard output,
    /// once: only the secret's hash is stored.
    static func clients(_ action: ClientsAction, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let registry = ClientRegistry(storage: storage)
            switch action {
            case .add(let name):
                let (client, secret) = try registry.add(name: name)
                output.error(
                    "keyauth-server: client \(name) added; the secret is shown only now, store it with the client:\n")
                output.standard("client_id=\(client.id)\nclient_secret=\(secret)\n")
            case .list:
                var lines = ["CLIENT_ID\tNAME\tCREATED"]
                for client in try registry.list() {
                    lines.append(
                        [client.id, client.name, RFC3339.string(fromSeconds: client.createdAt)].joined(separator: "\t"))
                }
                output.standard(lines.joined(separator: "\n") + "\n")
            case .remove(let id):
                guard try registry.remove(id: id) else { throw ServerConfigurationError("no client \(id)") }
                output.standard("removed client \(id)\n")
            }
        }
    }

    /// The state column of `keys list`.
    private static func stateName(_ state: SigningKeySchedule.State) -> String {
        switch state {
        case .next: "next"
        case .current: "current"
        case .previous: "previous"
        case .retired: "retired"
        }
    }

    private static func withStorage(
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
