import KeyAuth
import KeyAuthArguments

/// The admin commands (`enroll`, `devices`, `approve`, `revoke`, `users`, `delete-user`, `codes`,
/// `keys`, `clients`): the service's own rules (``DeviceRegistry``, ``EnrollmentCodes``) on a database the
/// administrator names, without a signing key or a listener.
extension ServerCommand {
    /// `enroll USER`: a one-time enrollment code, on standard output only.
    static func enroll(user: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let code = try EnrollmentCodes(storage: storage).issue(for: user)
            // Worded for both places the code goes: the next line on a terminal, or a variable
            // (`code=$(keyauth-server enroll alice)`), where a line ending in a colon points at nothing.
            output.error(
                "keyauth-server: made a one-time enrollment code for \(user), valid 15 minutes; it is the line on "
                    + "standard output, for `keyauth register --user \(user) --enrollment-code CODE`\n")
            output.standard(code + "\n")
        }
    }

    /// Which devices `devices` lists.
    package struct DeviceFilter: Sendable, Equatable {
        /// Only this user's.
        package var user: String?
        /// Only those in this state as clients see it (`expired` for pending past its lifetime).
        package var status: DeviceStatus?
        /// One JSON array instead of columns.
        package var json = false
    }

    /// `devices [--user U] [--status S] [--json]`: every device of every user (or the chosen
    /// ones), states as clients see them, in aligned columns with the name last (it may hold
    /// spaces), or as JSON.
    static func listDevices(_ filter: DeviceFilter, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let registry = DeviceRegistry.administering(storage)
            let devices = try (filter.user.map { try storage.devices(user: $0) } ?? registry.allDevices())
                .filter { filter.status == nil || registry.visibleStatus($0) == filter.status }
            if filter.json {
                output.standard(
                    JSONValue.array(devices.map { Self.json(of: $0, registry: registry) }).serialized(
                        leadingKeys: ["kid", "user", "name", "status"]) + "\n")
                return
            }
            var table = TextTable(header: ["KID", "USER", "STATUS", "TIER", "CREATED", "LAST_LOGIN", "NAME"])
            for device in devices {
                table.rows.append([
                    device.kid, device.user, registry.visibleStatus(device).rawValue, device.tier.rawValue,
                    RFC3339.string(fromSeconds: device.createdAt),
                    device.lastLoginAt.map(RFC3339.string(fromSeconds:)) ?? "", device.name,
                ])
            }
            output.standard(table.rendered)
        }
    }

    private static func json(of device: DeviceRecord, registry: DeviceRegistry) -> JSONValue {
        var object: [String: JSONValue] = [
            "kid": .string(device.kid), "user": .string(device.user), "name": .string(device.name),
            "status": .string(registry.visibleStatus(device).rawValue),
            "created_at": .string(RFC3339.string(fromSeconds: device.createdAt)),
        ]
        let times = [
            ("approved_at", device.approvedAt), ("revoked_at", device.revokedAt),
            ("last_login_at", device.lastLoginAt),
        ]
        for (name, time) in times {
            object[name] = time.map { .string(RFC3339.string(fromSeconds: $0)) } ?? .null
        }
        object["registered_from"] = device.registeredFrom.map(JSONValue.string) ?? .null
        object["tier"] = .string(device.tier.rawValue)
        return .object(object)
    }

    /// The one device `text` (a key ID or a prefix of at least 8 characters) names.
    ///
    /// - Throws: ``ServerConfigurationError`` for no match or for several, which it lists, so
    ///   that the administrator can type a longer prefix.
    private static func resolve(_ text: String, _ registry: DeviceRegistry) throws -> DeviceRecord {
        switch try registry.device(matching: text) {
        case .device(let device): return device
        case .none: throw ServerConfigurationError.nothingMatched("no device \(text)")
        case .ambiguous(let devices):
            let list = devices.map { "  \($0.kid)  \($0.user)  \(registry.visibleStatus($0).rawValue)  \($0.name)" }
            throw ServerConfigurationError(
                "\(text) matches \(devices.count) devices; give more of the key ID:\n" + list.joined(separator: "\n"))
        }
    }

    /// `revoke KID`: revokes an active device or denies a pending one, any user's, through the
    /// registry's revocation (the same rule and retry as `DELETE /v1/devices/{kid}`).
    static func revoke(kid text: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let registry = DeviceRegistry.administering(storage)
            let kid = try resolve(text, registry).kid
            switch try registry.revoke(kid: kid, ownedBy: nil, by: .administrator) {
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
            guard case .list = action else {
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
            case .list(let json):
                try listKeys(rotation, json: json, output: output)
            case .rotate(let requested, let delay, let requestedBits):
                let algorithm = try requested ?? rotation.currentAlgorithm() ?? .rs256
                let bits = algorithm == .rs256 ? try requestedBits ?? rotation.newestRSABits() ?? 2048 : 2048
                let (kid, activeFrom) = try rotation.rotate(to: algorithm, delay: delay, rsaBits: bits)
                output.standard("\(kid)\n")
                try recordDone("stored signing key \(kid)", in: storage) { (trail) throws(StorageError) in
                    try trail.record(.rotateKey, by: .administrator, subject: kid, detail: algorithm.rawValue)
                }
                // Running servers read the keys again at their periodic cleanup: the key is stored
                // now, but a JWK set shows it only after that.
                output.error(
                    "keyauth-server: new \(algorithm.rawValue) signing key \(kid) stored; each running server "
                        + "publishes it at its next cleanup (within its --cleanup-interval, default 1m) and signs "
                        + "with it from \(RFC3339.string(fromSeconds: activeFrom)) (in \(DurationText.text(delay))); "
                        + "the current key stays published until its last token has expired\n")
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
            case .add(let name, let redirectURIs, let postLogoutRedirectURIs, let isPublic, let kind, let allowedUsers):
                let (client, secret) = try registry.add(
                    name: name, redirectURIs: redirectURIs, postLogoutRedirectURIs: postLogoutRedirectURIs,
                    isPublic: isPublic, kind: kind, allowedUsers: allowedUsers)
                let hostDetail = kind == .host ? ["host, users:"] + (allowedUsers.isEmpty ? ["all"] : allowedUsers) : []
                if let secret {
                    output.error(
                        "keyauth-server: client \(name) added; the secret is shown only now, store it with the client:\n"
                    )
                    output.standard("client_id=\(client.id)\nclient_secret=\(secret)\n")
                } else {
                    output.error("keyauth-server: public client \(name) added; it has no secret and must use PKCE\n")
                    output.standard("client_id=\(client.id)\n")
                }
                // After the secret is shown: the client exists now, and a secret not shown then
                // could never be shown again.
                try recordDone("added client \(client.id)", in: storage) { (trail) throws(StorageError) in
                    try trail.record(
                        .addClient, by: .administrator, subject: client.id,
                        detail: ([name] + redirectURIs + hostDetail).joined(separator: " "))
                }
            case .list(let json):
                try listClients(registry, json: json, output: output)
            case .remove(let id):
                guard try registry.remove(id: id) else {
                    throw ServerConfigurationError.nothingMatched("no client \(id)")
                }
                output.standard("removed client \(id)\n")
                try recordDone("removed client \(id)", in: storage) { (trail) throws(StorageError) in
                    try trail.record(.removeClient, by: .administrator, subject: id)
                }
            }
        }
    }

    /// `approve KID`: approves a pending device of any user, with the rules of
    /// `POST /v1/devices/{kid}/approve` (an expired, denied or revoked device cannot be).
    static func approve(kid text: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let registry = DeviceRegistry.administering(storage)
            let target = try resolve(text, registry)
            let wasActive = target.status == .active
            do {
                let device = try registry.approve(kid: target.kid, ownedBy: nil, by: .administrator)
                output.standard(
                    wasActive ? "\(device.kid) is already active\n" : "approved \(device.kid) (\(device.user))\n")
            } catch let error as ServiceError {
                throw ServerConfigurationError(
                    "cannot approve \(target.kid): \(error.description)", status: ExitStatus.failure)
            }
        }
    }

    /// `delete-user USER`: revokes every device of the user, then deletes their devices and codes.
    static func deleteUser(_ user: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            do {
                let deleted = try DeviceRegistry.administering(storage).deleteUser(user)
                output.standard("deleted \(user): \(deleted.devices) devices, \(deleted.codes) enrollment codes\n")
            } catch let error as ServiceError where error.kind == .unknownDevice {
                throw ServerConfigurationError.nothingMatched("no user named \(user)")
            }
        }
    }

    /// `codes list [--json]`: the enrollment codes still usable, by a short ID of their hash
    /// (the codes themselves are not stored).
    static func listCodes(json: Bool, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            var listing = Listing([("ID", "id"), ("USER", "user"), ("EXPIRES", "expires_at")])
            for code in try storage.enrollmentCodes(usableAt: ServerClock.now()) {
                listing.append([.text(code.shortID), .text(code.user), .time(code.expiresAt)])
            }
            listing.write(json: json, to: output)
        }
    }

    /// `codes revoke USER`: deletes the user's unused codes and records it in the audit trail;
    /// a user without any is "nothing matched", as `delete-user` of an unknown user.
    static func revokeCodes(user: String, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let count = try storage.deleteEnrollmentCodes(user: user)
            guard count > 0 else {
                throw ServerConfigurationError.nothingMatched("no unused enrollment codes for a user named \(user)")
            }
            output.standard("revoked \(count) enrollment codes of \(user)\n")
            try recordDone("revoked the codes", in: storage) { (trail) throws(StorageError) in
                try trail.record(.revokeCodes, by: .administrator, user: user, detail: "\(count)")
            }
        }
    }

    /// Writes the audit entry of a change already made (`done`, for the message): a failure says
    /// the change stands, so that the operator neither takes it for a failed change and runs it
    /// again (a second key, a second client) nor misses the entry a restore's list of what to
    /// redo is built from. Exit 1.
    static func recordDone(
        _ done: String, in storage: any ServerStorage, _ body: (AuditTrail) throws(StorageError) -> Void
    ) throws(ServerConfigurationError) {
        do {
            try body(AuditTrail(storage: storage))
        } catch {
            throw ServerConfigurationError(
                "\(done), but its audit entry could not be written (\(error.description)); "
                    + "the change stands: note it by hand", status: ExitStatus.failure)
        }
    }

    static func withStorage(
        _ database: String, output: Output, _ body: (any ServerStorage) throws -> Void
    ) -> Int32 {
        let storage: any ServerStorage
        do {
            storage = try StorageFactory.open(database, creatingIfMissing: false, migrating: false)
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
            return error.status
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
