import Foundation
import KeyAuth

/// One registration of this machine: a server, a user, and the device key kept for them.
///
/// Stored as `accounts/<name>/account.json` next to the key, so that later commands know where
/// to log in, which audience to sign for, and which presence check protects the key without
/// asking again.
package struct KeyAuthAccount: Sendable, Hashable {
    /// How far registration got.
    package struct Status: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        package let rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package var description: String { rawValue }

        /// The key is being generated or sent; an account left in this state was interrupted.
        package static let registering = Status(rawValue: "registering")
        /// The server recorded the key; another device must approve it.
        package static let pending = Status(rawValue: "pending")
        /// The key has logged in.
        package static let active = Status(rawValue: "active")
    }

    /// The account's name, also its directory name.
    package var name: String
    /// The server's base URL, without a trailing slash.
    package var serverURL: String
    /// The server's issuer URL: the audience of assertions.
    package var issuer: String
    /// The user name on the server.
    package var user: String
    /// The device name registered with the key.
    package var deviceName: String
    /// The key's fingerprint once the server recorded it.
    package var keyID: String?
    /// How the key is protected.
    package var presence: PresenceKind
    /// Where the key lives: a key file or a TPM (`key_store` in `account.json`; an account
    /// written before TPM keys existed has a key file).
    package var keyStore: KeyStore.Kind
    /// The PAM service, when ``presence`` is `.pam`.
    package var pamService: String?
    /// Whether the person accepted plain `http://` to a host that is not loopback at
    /// registration (`keyauth register --insecure-http`), so that later commands reach the
    /// same server without asking again.
    package var insecureHTTP: Bool
    /// How far registration got.
    package var status: Status
    /// When the account was created.
    package var createdAt: Date
    /// When the server last refused this device's key at login (`invalid_grant`: revoked, or
    /// unknown to the server), so that `keyauth status` and `keyauth reset` tell the truth
    /// without asking for the PIN; nil once a login succeeds again.
    package var refusedAt: Date?
    /// The tier the server gave the device at registration (`attested`, `tpm-unverified`,
    /// `software`; `tier` in `account.json`); nil for a server older than tiers or an account
    /// registered before them.
    package var tier: DeviceTier?

    /// Creates an account record.
    package init(
        name: String, serverURL: String, issuer: String, user: String, deviceName: String, keyID: String? = nil,
        presence: PresenceKind, keyStore: KeyStore.Kind = .file, pamService: String? = nil, insecureHTTP: Bool = false,
        status: Status = .registering, createdAt: Date = Date()
    ) {
        self.name = name
        self.serverURL = serverURL
        self.issuer = issuer
        self.user = user
        self.deviceName = deviceName
        self.keyID = keyID
        self.presence = presence
        self.keyStore = keyStore
        self.pamService = pamService
        self.insecureHTTP = insecureHTTP
        self.status = status
        self.createdAt = createdAt
    }

    /// The JSON object stored in `account.json`.
    package var jsonValue: JSONValue {
        var members: [String: JSONValue] = [
            "name": .string(name), "server": .string(serverURL), "issuer": .string(issuer), "user": .string(user),
            "device_name": .string(deviceName), "presence": .string(presence.rawValue),
            "key_store": .string(keyStore.rawValue),
            "status": .string(status.rawValue),
            "created_at": .integer(Int64(clampingSeconds: createdAt.timeIntervalSince1970)),
        ]
        if let keyID { members["kid"] = .string(keyID) }
        if let pamService { members["pam_service"] = .string(pamService) }
        // Written only when set: an account without it is the secure default.
        if insecureHTTP { members["insecure_http"] = .bool(true) }
        if let tier { members["tier"] = .string(tier.rawValue) }
        if let refusedAt { members["refused_at"] = .integer(Int64(clampingSeconds: refusedAt.timeIntervalSince1970)) }
        return .object(members)
    }

    /// Reads an account from its JSON object.
    ///
    /// - Throws: `.accountCorrupt` naming the first member that is missing or wrong.
    package init(jsonValue: JSONValue) throws(KeyAuthError) {
        guard let object = jsonValue.objectValue else {
            throw KeyAuthError(.accountCorrupt, "the account file is not a JSON object")
        }
        func string(_ key: String) throws(KeyAuthError) -> String {
            guard let value = object[key]?.stringValue, !value.isEmpty else {
                throw KeyAuthError(.accountCorrupt, "the account file has no valid \"\(key)\"")
            }
            return value
        }
        func optionalString(_ key: String) throws(KeyAuthError) -> String? {
            guard let value = object[key], value != .null else { return nil }
            guard let text = value.stringValue else {
                throw KeyAuthError(.accountCorrupt, "the account file has an invalid \"\(key)\"")
            }
            return text
        }
        guard let presence = PresenceKind(rawValue: try string("presence")) else {
            throw KeyAuthError(.accountCorrupt, "the account file has an unknown presence kind")
        }
        let keyStore: KeyStore.Kind
        switch object["key_store"] {
        case nil, .null?: keyStore = .file
        case .string(let text)?:
            guard let kind = KeyStore.Kind(rawValue: text) else {
                throw KeyAuthError(.accountCorrupt, "the account file has an unknown key store")
            }
            keyStore = kind
        default: throw KeyAuthError(.accountCorrupt, "the account file has an invalid \"key_store\"")
        }
        let insecureHTTP: Bool
        switch object["insecure_http"] {
        case nil, .null?: insecureHTTP = false
        case .bool(let value)?: insecureHTTP = value
        default: throw KeyAuthError(.accountCorrupt, "the account file has an invalid \"insecure_http\"")
        }
        let refusedAt: Date?
        switch object["refused_at"] {
        case nil, .null?: refusedAt = nil
        case .integer(let seconds)?: refusedAt = Date(timeIntervalSince1970: TimeInterval(seconds))
        default: throw KeyAuthError(.accountCorrupt, "the account file has an invalid \"refused_at\"")
        }
        self.init(
            name: try string("name"), serverURL: try string("server"), issuer: try string("issuer"),
            user: try string("user"), deviceName: try string("device_name"), keyID: try optionalString("kid"),
            presence: presence, keyStore: keyStore, pamService: try optionalString("pam_service"),
            insecureHTTP: insecureHTTP,
            status: Status(rawValue: try string("status")),
            createdAt: Date(timeIntervalSince1970: TimeInterval(object["created_at"]?.integerValue ?? 0)))
        self.refusedAt = refusedAt
        self.tier = try optionalString("tier").flatMap(DeviceTier.init(name:))
    }
}
