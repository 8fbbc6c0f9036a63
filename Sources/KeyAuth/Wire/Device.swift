/// One of the user's devices, as `GET /v1/devices` lists it (PROTOCOL.md section 4, "Device
/// list") and `POST /v1/devices/{kid}/approve` answers it.
public struct Device: Sendable, Hashable {
    /// The key's fingerprint.
    public let keyID: String
    /// The device name given at registration.
    public let name: String
    /// Its current state.
    public let status: DeviceStatus
    /// When it was registered, RFC 3339 UTC as the server wrote it.
    public let createdAt: String?
    /// When it last logged in, RFC 3339 UTC, or nil if never.
    public let lastLoginAt: String?
    /// The client address the server saw at registration, or nil when it did not record one;
    /// what lets a person tell their own new laptop from someone else's registration before
    /// approving it.
    public let registeredFrom: String?
    /// What the server established of where the key lives (`attested`, `tpm-unverified`,
    /// `software`); nil from a server older than tiers.
    package var tier: DeviceTier?

    /// Creates a device record.
    public init(
        keyID: String, name: String, status: DeviceStatus, createdAt: String?, lastLoginAt: String?,
        registeredFrom: String? = nil
    ) {
        self.keyID = keyID
        self.name = name
        self.status = status
        self.createdAt = createdAt
        self.lastLoginAt = lastLoginAt
        self.registeredFrom = registeredFrom
    }
}

extension Device {
    /// The members of a list entry: `kid`, `name`, `status`, `created_at`, `last_login_at` and
    /// `registered_from`, the last three `null` when unknown.
    package var jsonMembers: [String: JSONValue] {
        [
            "kid": .string(keyID), "name": .string(name), "status": .string(status.rawValue),
            "created_at": createdAt.map(JSONValue.string) ?? .null,
            "last_login_at": lastLoginAt.map(JSONValue.string) ?? .null,
            "registered_from": registeredFrom.map(JSONValue.string) ?? .null,
        ].merging(tier.map { ["tier": JSONValue.string($0.rawValue)] } ?? [:]) { first, _ in first }
    }

    /// Reads a list entry as a client: `kid` and `status` are required, `registered_from` is a
    /// string or null, a missing `name` is empty and the times are optional.
    ///
    /// - Throws: ``WireFormatError`` naming the member that is missing or wrong.
    package init(jsonValue entry: JSONValue) throws(WireFormatError) {
        guard let keyID = entry["kid"]?.stringValue, let status = entry["status"]?.stringValue else {
            throw WireFormatError("has no kid or status")
        }
        // A fingerprint, as every key ID is: printed, and typed back into URL paths.
        guard InputRules.isValidKeyID(keyID) else { throw WireFormatError("has a kid that is not a key fingerprint") }
        let registeredFrom: String?
        switch entry["registered_from"] {
        case nil, .null?: registeredFrom = nil
        case .string(let address)?: registeredFrom = address
        default: throw WireFormatError("has an invalid registered_from")
        }
        self.init(
            keyID: keyID, name: entry["name"]?.stringValue ?? "", status: DeviceStatus(rawValue: status),
            createdAt: entry["created_at"]?.stringValue, lastLoginAt: entry["last_login_at"]?.stringValue,
            registeredFrom: registeredFrom)
        tier = entry["tier"]?.stringValue.flatMap(DeviceTier.init(name:))
    }
}

/// One page of `GET /v1/devices`: the entries and, while devices remain, the cursor to the next
/// page (PROTOCOL.md section 4, "Device list").
package struct DeviceListPage: Sendable, Equatable {
    /// The longest `next_cursor` a client follows.
    package static let maximumCursorLength = 1024

    /// The devices of this page, oldest first.
    package var devices: [Device]
    /// The opaque cursor of the next page; nil on the last page.
    package var nextCursor: String?

    package init(devices: [Device], nextCursor: String?) {
        self.devices = devices
        self.nextCursor = nextCursor
    }

    /// `{"devices":[...],"next_cursor":"..."}`, the cursor only while devices remain.
    package var jsonValue: JSONValue {
        var body: [String: JSONValue] = ["devices": .array(devices.map { .object($0.jsonMembers) })]
        if let nextCursor { body["next_cursor"] = .string(nextCursor) }
        return .object(body)
    }

    /// Reads a page as a client.
    ///
    /// - Throws: ``WireFormatError`` for a missing `devices` array, an entry that
    ///   ``Device/init(jsonValue:)`` refuses (marked as in an entry), or a `next_cursor` that is neither null nor a non-empty string of at most
    ///   ``maximumCursorLength`` bytes.
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let entries = object["devices"]?.arrayValue else { throw WireFormatError("has no devices array") }
        var devices: [Device] = []
        for entry in entries {
            do {
                devices.append(try Device(jsonValue: entry))
            } catch {
                throw WireFormatError(error.problem, isInEntry: true)
            }
        }
        switch object["next_cursor"] {
        case nil, .null?:
            nextCursor = nil
        case .string(let next)? where !next.isEmpty && next.utf8.count <= Self.maximumCursorLength:
            nextCursor = next
        default:
            throw WireFormatError("has an invalid next_cursor")
        }
        self.devices = devices
    }
}
