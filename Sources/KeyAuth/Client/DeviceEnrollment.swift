/// What registration needs besides the key: who the device belongs to and what to call it.
public struct DeviceEnrollment: Sendable, Hashable {
    /// The user name on the server: 1 to 64 characters of `[A-Za-z0-9._@-]`.
    public var user: String
    /// The device name shown in device lists: 1 to 64 printable characters, no whitespace at
    /// either end.
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
        InputRules.isValidUser(user)
    }

    /// Whether `name` fits the server's rule: 1 to 64 printable characters, without control or
    /// format characters and without whitespace at either end.
    public static func isValidDeviceName(_ name: String) -> Bool {
        InputRules.isValidDeviceName(name)
    }
}
