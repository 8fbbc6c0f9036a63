/// The server's answer to a registration: which key it recorded and whether it can log in yet.
public struct DeviceRegistration: Sendable, Hashable {
    /// The key's fingerprint, as the server computed it.
    public let keyID: String
    /// The user the key belongs to.
    public let user: String
    /// The device name.
    public let name: String
    /// `active` or `pending` for a new key; an existing key reports its current state.
    public let status: DeviceStatus
    /// False when the server already had this key for this user (HTTP 200), so that a repeated
    /// registration is recognisable.
    public let isNew: Bool
    /// What the server established of where the key lives (`attested`, `tpm-unverified`,
    /// `software`); nil from a server older than tiers.
    package var tier: DeviceTier?

    /// Creates a registration result.
    public init(keyID: String, user: String, name: String, status: DeviceStatus, isNew: Bool) {
        self.keyID = keyID
        self.user = user
        self.name = name
        self.status = status
        self.isNew = isNew
    }
}
