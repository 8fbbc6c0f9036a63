/// One of the user's devices, as `GET /v1/devices` lists it.
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
