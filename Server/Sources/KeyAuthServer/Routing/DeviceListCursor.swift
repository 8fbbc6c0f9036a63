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
        PositionCursor.encode(createdAt: position.createdAt, id: position.kid)
    }

    /// The position in `cursor`, or nil when it is not a cursor this server writes.
    static func decode(_ cursor: String) -> DeviceListPosition? {
        PositionCursor.decode(cursor, isValidID: InputRules.isValidKeyID).map {
            DeviceListPosition(createdAt: $0.createdAt, kid: $0.id)
        }
    }
}
