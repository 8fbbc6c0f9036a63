/// What registration needs besides the key: who the device belongs to and what to call it.
public struct DeviceEnrollment: Sendable, Hashable {
    /// The user name on the server: 1 to 64 characters of `[A-Za-z0-9._@-]`, the first a letter
    /// or a digit.
    public var user: String
    /// The device name shown in device lists and approval prompts (PROTOCOL.md section 4): up to
    /// 64 characters in one script, without invisible characters; see
    /// ``normalizedDeviceName(_:)``.
    public var deviceName: String
    /// A one-time code from `keyauth-server enroll`, for servers that require one or to skip
    /// approval by another device.
    /// - Warning: it is a credential until used; do not log it.
    public var enrollmentCode: String?
    /// One of the user's own recovery codes (`keyauth recovery-codes`), to enrol this device
    /// without another device's approval when every device is lost.
    /// - Warning: it is a credential until used; do not log it.
    package var recoveryCode: String?
    /// How the key was protected when it was made, sent with the registration
    /// (``KeyProtection``): ``KeyProtection/pin`` when the presence check's PIN is what opens the
    /// key (``PINPresence``), ``KeyProtection/withoutPIN`` otherwise. nil sends nothing, and the
    /// server then counts the key as one without a PIN where that matters: it cannot log in to a
    /// host or approve a host's login.
    public var keyProtection: KeyProtection?

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

    /// Whether `name` fits the server's rule for device names.
    public static func isValidDeviceName(_ name: String) -> Bool {
        NameRule.deviceName.accepts(name)
    }

    /// `name` as the server stores it (NFC), checked with the server's rule before anything is
    /// generated.
    ///
    /// The rule (PROTOCOL.md section 4): 1 to 64 characters, 128 code points and 256 bytes in
    /// UTF-8; no control, format, invisible, private-use or unassigned characters; U+0020 as the
    /// only space, never at either end or twice in a row; at most 4 combining marks in a row; no
    /// compatibility forms of letters or digits; digits of one system; and one script, or Latin
    /// with Han, Hiragana, Katakana, Bopomofo or Hangul as Unicode TS #39 allows.
    ///
    /// - Throws: `.invalidArgument` saying what is wrong, without repeating the name.
    public static func normalizedDeviceName(_ name: String) throws(KeyAuthError) -> String {
        do {
            return try NameRule.deviceName.normalize(name)
        } catch {
            throw KeyAuthError(.invalidArgument, "the device name \(error)")
        }
    }
}
