import KeyAuth

/// A device's statement, in its login assertion, that the login is a host login made through
/// `pam_keyauth` (`host_login`: `host`, `service`, `linux_user`), which the server writes to the
/// audit trail.
///
/// The server cannot check it, as it cannot check `amr`: it records what the device says, under
/// the device's own key and user, so a device can only add lines about itself. A malformed
/// statement is refused rather than dropped, so that the trail never misses one it was sent.
struct HostLoginStatement: Equatable, Sendable {
    let host: String
    let service: String
    let linuxUser: String
    /// The `client_id` of the host, when the host is a client of this server (its `pam.conf`):
    /// the server then applies that host client's user list (``HostClients``).
    let hostClient: String?

    /// The claim's name in the assertion.
    static let claim = "host_login"

    /// The statement in `claims`, nil when there is none.
    ///
    /// - Throws: `invalid_grant` when `host_login` is not an object of three short strings
    ///   without control characters.
    init?(_ claims: JWTClaims) throws(ServiceError) {
        guard let value = claims[Self.claim] else { return nil }
        guard let members = value.objectValue,
            members.count == (members["host_client"] == nil ? 3 : 4),
            let host = Self.text(members["host"], limit: 253),
            let service = Self.text(members["service"], limit: 256),
            let linuxUser = Self.text(members["linux_user"], limit: 256)
        else {
            throw ServiceError(
                .invalidGrant,
                "the assertion's host_login must be an object of host, service and linux_user, short strings")
        }
        self.host = host
        self.service = service
        self.linuxUser = linuxUser
        if let id = members["host_client"] {
            guard let text = Self.text(id, limit: 64) else {
                throw ServiceError(.invalidGrant, "the assertion's host_login.host_client must be a short string")
            }
            hostClient = text
        } else {
            hostClient = nil
        }
    }

    /// A non-empty string of at most `limit` bytes without control characters, or nil.
    private static func text(_ value: JSONValue?, limit: Int) -> String? {
        guard let text = value?.stringValue, !text.isEmpty, text.utf8.count <= limit,
            !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { return nil }
        return text
    }

    /// The audit event's detail: `online`, as opposed to a push login's `push` (``HostClients``).
    var detail: String {
        "online, service \(service), linux user \(linuxUser)" + (hostClient.map { ", host client \($0)" } ?? "")
    }
}
