import KeyAuth

/// The start of a 43-character identifier (a device's key ID, a sign-in request's ID) that a
/// person types instead of the whole: too long to read aloud from one screen and type on
/// another, so the commands take its first 8 characters or more, as long as they name one thing.
enum IDPrefix {
    /// The length of a short code, and of the shortest prefix accepted: 48 bits, so that two
    /// open items of one user sharing it by chance is not a practical concern.
    static let shortCodeLength = 8

    /// The short code of an identifier: its first ``shortCodeLength`` characters.
    static func shortCode(_ id: String) -> String {
        String(id.prefix(shortCodeLength))
    }

    /// Whether `text` can start an identifier: 8 to 43 characters of base64url, and at 43 a
    /// whole valid one.
    static func isValid(_ text: String) -> Bool {
        guard (shortCodeLength...43).contains(text.utf8.count) else { return false }
        guard text.utf8.count < 43 else { return InputRules.isValidKeyID(text) }
        return text.utf8.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "_")
        }
    }

    /// What `prefix` names among `items`.
    enum Match<Item> {
        case one(Item)
        case none
        case several([Item])
    }

    /// The items whose identifier starts with `prefix`: one, none, or several.
    static func match<Item>(_ prefix: String, in items: [Item], id: (Item) -> String) -> Match<Item> {
        let matches = items.filter { id($0).hasPrefix(prefix) }
        switch matches.count {
        case 0: return .none
        case 1: return .one(matches[0])
        default: return .several(matches)
        }
    }
}
