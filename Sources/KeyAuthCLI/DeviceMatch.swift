import KeyAuth

/// Finds the device a person means by the start of its key ID.
///
/// A key ID is 43 characters, too long to read aloud from one screen and type on another; a
/// pending registration prints its first 8 (the short code), and `devices approve` and `revoke`
/// accept any prefix that long or longer, as long as it names one device of the user.
enum DeviceMatch {
    /// The length of the short code, and of the shortest prefix accepted (``IDPrefix``).
    static let shortCodeLength = IDPrefix.shortCodeLength

    /// The short code of a key ID: its first ``shortCodeLength`` characters.
    static func shortCode(_ keyID: String) -> String {
        IDPrefix.shortCode(keyID)
    }

    /// Whether `text` can start a key ID: 8 to 43 characters of base64url.
    static func isValidPrefix(_ text: String) -> Bool {
        IDPrefix.isValid(text)
    }

    /// The one device in `devices` whose key ID starts with `prefix`.
    ///
    /// - Throws: `.invalidArgument` when none does, naming the user's devices' short codes'
    ///   absence plainly, or when several do, listing them so the person can give more characters.
    static func device(_ prefix: String, in devices: [Device], user: String) throws(KeyAuthError) -> Device {
        let matches: [Device]
        switch IDPrefix.match(prefix, in: devices, id: \.keyID) {
        case .one(let device): return device
        case .none:
            throw KeyAuthError(
                .invalidArgument, "no device of \(user) has a KID starting with \(prefix) (see `keyauth devices`)")
        case .several(let several): matches = several
        }
        let listed = matches.map { "\($0.keyID) \"\(Formatting.printable($0.name))\" (\($0.status.rawValue))" }
        throw KeyAuthError(
            .invalidArgument,
            "\(prefix) matches \(matches.count) devices: \(listed.joined(separator: ", ")); give more characters")
    }
}
