/// A registered device key and its state (PROTOCOL.md section 5).
///
/// Times are seconds since 1970 (UTC), the unit JWT claims use, so comparisons with `iat` and
/// `exp` need no conversion.
public struct DeviceRecord: Sendable, Hashable {
    /// The key's RFC 7638 fingerprint, which identifies the device everywhere.
    public var kid: String
    /// The owning user.
    public var user: String
    /// A label chosen by the user ("alice-laptop").
    public var name: String
    /// The public key as SPKI PEM. Never a private key: registration refuses those.
    public var publicKeyPEM: String
    /// Where the device is in its life cycle.
    public var status: DeviceStatus
    /// When the device was registered.
    public var createdAt: Int64
    /// When it became active, by approval or as the user's first device.
    public var approvedAt: Int64?
    /// When it was revoked or denied.
    public var revokedAt: Int64?
    /// When it last logged in successfully.
    public var lastLoginAt: Int64?

    /// Creates a record; optional times default to "never".
    public init(
        kid: String, user: String, name: String, publicKeyPEM: String, status: DeviceStatus, createdAt: Int64,
        approvedAt: Int64? = nil, revokedAt: Int64? = nil, lastLoginAt: Int64? = nil
    ) {
        self.kid = kid
        self.user = user
        self.name = name
        self.publicKeyPEM = publicKeyPEM
        self.status = status
        self.createdAt = createdAt
        self.approvedAt = approvedAt
        self.revokedAt = revokedAt
        self.lastLoginAt = lastLoginAt
    }
}

/// The stored states of a device. "Expired" is not stored: a `pending` device older than the
/// pending lifetime is expired, so expiry needs no background job to be exact.
public enum DeviceStatus: String, Sendable, Hashable, CaseIterable {
    /// Registered, waiting for approval by an active device of the same user.
    case pending
    /// May log in.
    case active
    /// Refused while pending; can never log in.
    case denied
    /// Removed after being active; can never log in again.
    case revoked
}

/// One of the server's own RSA signing keys.
public struct SigningKeyRecord: Sendable {
    /// The public key's fingerprint, used as `kid` in access tokens and the JWKS.
    public var kid: String
    /// The private key, PKCS#8 PEM.
    ///
    /// - Warning: secret. SQLite storage keeps it in the database file (protect the file like a
    ///   key file); callers wipe this copy after parsing it.
    public var privatePEM: [UInt8]
    /// When it was created; the oldest key signs.
    public var createdAt: Int64

    /// Creates a record.
    public init(kid: String, privatePEM: [UInt8], createdAt: Int64) {
        self.kid = kid
        self.privatePEM = privatePEM
        self.createdAt = createdAt
    }
}
