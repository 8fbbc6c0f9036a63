import KeyAuth

/// The text of the cursors that resume a list after a position, `created_at` then an id: the
/// device list's and the sign-in request list's. base64url of `"<created_at>.<id>"`, read back
/// only when it has exactly that shape, so a client learns and controls nothing through it.
enum PositionCursor {
    /// The cursor text for a position.
    static func encode(createdAt: Int64, id: String) -> String {
        Base64URL.encode(Array("\(createdAt).\(id)".utf8))
    }

    /// The position in `cursor`, or nil when it is not one this server writes or its id fails
    /// `isValidID`.
    static func decode(_ cursor: String, isValidID: (String) -> Bool) -> (createdAt: Int64, id: String)? {
        guard cursor.utf8.count <= 128, let bytes = Base64URL.decode(cursor),
            let text = String(validating: bytes, as: UTF8.self), let dot = text.firstIndex(of: ".")
        else { return nil }
        let id = String(text[text.index(after: dot)...])
        guard let createdAt = Int64(text[..<dot]), isValidID(id) else { return nil }
        return (createdAt, id)
    }
}
