/// The state of a device key on the server (PROTOCOL.md section 5).
///
/// A struct rather than an enum so that a state a newer server adds still decodes and prints.
public struct DeviceStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The key can log in.
    public static let active = DeviceStatus(rawValue: "active")
    /// The key waits for another device of the user to approve it.
    public static let pending = DeviceStatus(rawValue: "pending")
    /// Another device denied the pending key.
    public static let denied = DeviceStatus(rawValue: "denied")
    /// Nobody approved the pending key within ten minutes.
    public static let expired = DeviceStatus(rawValue: "expired")
    /// The key was revoked and can never log in again.
    public static let revoked = DeviceStatus(rawValue: "revoked")
}

extension DeviceStatus {
    /// The states a server stores: a closed set, so that the server's decisions on a device
    /// switch over every case. `expired` is not one of them: a pending device older than the
    /// pending lifetime is reported as expired, so expiry needs no background job to be exact.
    package enum Stored: String, Sendable, Hashable, CaseIterable {
        /// Registered, waiting for approval by an active device of the same user.
        case pending
        /// May log in.
        case active
        /// Refused while pending; can never log in.
        case denied
        /// Removed after being active; can never log in again.
        case revoked

        /// The same state as the wire names it.
        package var status: DeviceStatus { DeviceStatus(rawValue: rawValue) }
    }
}
