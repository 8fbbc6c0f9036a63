import KeyAuth

/// The `cursor` and `limit` of `GET /v1/devices` (PROTOCOL.md section 4, "Device list").
///
/// A cursor is the position of the last device of a page, `created_at` and `kid`, in base64url.
/// Clients treat it as opaque; the server reads back only what it wrote, so a position carries
/// nothing a client could use to reach another user's devices (the user always comes from the
/// access token). Resuming from a position rather than an offset means devices added or purged
/// between two requests neither repeat nor go missing from the pages that follow.
enum DeviceListCursor {
    /// The page sizes a client may ask for.
    static let limits = 1...100
    /// The page size when the client names none: the largest.
    static let defaultLimit = 100

    /// The cursor text for `position`.
    static func encode(_ position: DeviceListPosition) -> String {
        Base64URL.encode(Array("\(position.createdAt).\(position.kid)".utf8))
    }

    /// The position in `cursor`, or nil when it is not a cursor this server writes.
    static func decode(_ cursor: String) -> DeviceListPosition? {
        guard cursor.utf8.count <= 128, let bytes = Base64URL.decode(cursor),
            let text = String(validating: bytes, as: UTF8.self), let dot = text.firstIndex(of: ".")
        else { return nil }
        let kid = String(text[text.index(after: dot)...])
        guard let createdAt = Int64(text[..<dot]), InputRules.isValidKeyID(kid) else { return nil }
        return DeviceListPosition(createdAt: createdAt, kid: kid)
    }
}
