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
    /// The keyauth user the host maps the Linux user to (`/etc/keyauth/pam-users`), when stated:
    /// the server then refuses a device of anyone else. The helper reads the account to use from
    /// the Linux user's own home, which anything running as that user can change; only the
    /// server knows whose device a key is.
    let keyauthUser: String?

    /// The claim's name in the assertion.
    static let claim = "host_login"

    /// The statement in `claims`, nil when there is none.
    ///
    /// - Throws: `invalid_grant` when `host_login` is not an object of three short strings
    ///   without control characters, with at most the two optional members besides.
    init?(_ claims: JWTClaims) throws(ServiceError) {
        guard let value = claims[Self.claim] else { return nil }
        guard let members = value.objectValue,
            members.keys.allSatisfy(Self.members.contains),
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
        if let user = members["keyauth_user"] {
            guard let text = Self.text(user, limit: 256) else {
                throw ServiceError(.invalidGrant, "the assertion's host_login.keyauth_user must be a short string")
            }
            keyauthUser = text
        } else {
            keyauthUser = nil
        }
    }

    /// The members a statement may have: `host`, `service` and `linux_user` always.
    private static let members: Set<String> = ["host", "service", "linux_user", "host_client", "keyauth_user"]

    /// Refuses the login when the statement names a keyauth user and the device is another's.
    ///
    /// - Throws: `access_denied`, naming the user the host expects and not the device's.
    func checkUser(of device: DeviceRecord) throws(ServiceError) {
        guard let keyauthUser, !keyauthUser.isSameBytes(as: device.user) else { return }
        throw ServiceError(
            .accessDenied,
            "host \(host) logs linux user \(linuxUser) in as keyauth user \(keyauthUser), and this device is not theirs"
        )
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
