import KeyAuth

/// Finds the device a person means by the start of its key ID.
///
/// A key ID is 43 characters, too long to read aloud from one screen and type on another; a
/// pending registration prints its first 8 (the short code), and `devices approve` and `revoke`
/// accept any prefix that long or longer, as long as it names one device of the user.
enum DeviceMatch {
    /// The length of the short code, and of the shortest prefix accepted: 48 bits, so that two
    /// devices of one user sharing it by chance is not a practical concern.
    static let shortCodeLength = 8

    /// The short code of a key ID: its first ``shortCodeLength`` characters.
    static func shortCode(_ keyID: String) -> String {
        String(keyID.prefix(shortCodeLength))
    }

    /// Whether `text` can start a key ID: 8 to 43 characters of base64url.
    static func isValidPrefix(_ text: String) -> Bool {
        guard (shortCodeLength...43).contains(text.utf8.count) else { return false }
        guard text.utf8.count < 43 else { return InputRules.isValidKeyID(text) }
        return text.utf8.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "_")
        }
    }

    /// The one device in `devices` whose key ID starts with `prefix`.
    ///
    /// - Throws: `.invalidArgument` when none does, naming the user's devices' short codes'
    ///   absence plainly, or when several do, listing them so the person can give more characters.
    static func device(_ prefix: String, in devices: [Device], user: String) throws(KeyAuthError) -> Device {
        let matches = devices.filter { $0.keyID.hasPrefix(prefix) }
        if matches.count == 1, let device = matches.first { return device }
        guard !matches.isEmpty else {
            throw KeyAuthError(
                .invalidArgument, "no device of \(user) has a KID starting with \(prefix) (see `keyauth devices`)")
        }
        let listed = matches.map { "\($0.keyID) \"\(Formatting.printable($0.name))\" (\($0.status.rawValue))" }
        throw KeyAuthError(
            .invalidArgument,
            "\(prefix) matches \(matches.count) devices: \(listed.joined(separator: ", ")); give more characters")
    }
}
