/// What registration needs besides the key: who the device belongs to and what to call it.
public struct DeviceEnrollment: Sendable, Hashable {
    /// The user name on the server: 1 to 64 characters of `[A-Za-z0-9._@-]`.
    public var user: String
    /// The device name shown in device lists: 1 to 64 printable characters.
    public var deviceName: String
    /// A one-time code from `keyauth-server enroll`, for servers that require one or to skip
    /// approval by another device.
    /// - Warning: it is a credential until used; do not log it.
    public var enrollmentCode: String?

    /// Creates an enrollment.
    public init(user: String, deviceName: String, enrollmentCode: String? = nil) {
        self.user = user
        self.deviceName = deviceName
        self.enrollmentCode = enrollmentCode
    }

    /// Whether `user` fits the server's rule, checked before anything is generated.
    public static func isValidUser(_ user: String) -> Bool {
        let scalars = user.unicodeScalars
        guard (1...64).contains(scalars.count) else { return false }
        return scalars.allSatisfy { scalar in
            ("A"..."Z").contains(scalar) || ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar)
                || scalar == "." || scalar == "_" || scalar == "@" || scalar == "-"
        }
    }

    /// Whether `name` fits the server's rule: 1 to 64 printable characters.
    public static func isValidDeviceName(_ name: String) -> Bool {
        guard (1...64).contains(name.count) else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            scalar.value >= 0x20 && scalar.value != 0x7F && !(0x80...0x9F).contains(scalar.value)
        }
    }
}
