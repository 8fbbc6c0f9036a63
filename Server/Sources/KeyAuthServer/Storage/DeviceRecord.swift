import KeyAuth

/// A registered device key and its state (PROTOCOL.md section 5).
///
/// Times are seconds since 1970 (UTC), the unit JWT claims use, so comparisons with `iat` and
/// `exp` need no conversion.
package struct DeviceRecord: Sendable, Hashable {
    /// The key's RFC 7638 fingerprint, which identifies the device everywhere.
    package var kid: String
    /// The owning user.
    package var user: String
    /// A label chosen by the user ("alice-laptop").
    package var name: String
    /// The public key as SPKI PEM. Never a private key: registration refuses those.
    package var publicKeyPEM: String
    /// Where the device is in its life cycle.
    package var status: DeviceStatus.Stored
    /// When the device was registered.
    package var createdAt: Int64
    /// When it became active, by approval or as the user's first device.
    package var approvedAt: Int64?
    /// When it was revoked or denied.
    package var revokedAt: Int64?
    /// When it last logged in successfully.
    package var lastLoginAt: Int64?
    /// The client address the registration came from, as the server determined it (the last
    /// `X-Forwarded-For` hop behind a trusted proxy), so that whoever approves a pending device
    /// can tell a stranger's request from their own. Nil for devices stored before the server
    /// recorded it.
    package var registeredFrom: String?
    /// What registration established of where the key lives: `attested`, `tpm-unverified`, or
    /// `software` for a registration without attestation (and every device stored before tiers).
    package var tier: DeviceTier
    /// How the key was protected when it was made, as its registration stated it and its
    /// approver's key allowed (an approval by a key without a PIN makes it `none`); nil when the
    /// client did not say or the device was registered before the server kept it. Only `pin`
    /// may log in to a host (``mayStandInForPassword``).
    package var keyProtection: KeyProtection?

    /// Whether this device may log in to a host, or approve a host's push login, where its PIN
    /// stands in for a password: only when its registration stated a PIN (``KeyProtection/pin``)
    /// and every key that vouched for it did too.
    ///
    /// A key that never said is refused like one made without a PIN. Anything running as the user
    /// can put a PIN of its choosing on such a key (an application's key file without one, say)
    /// and then pass `sudo` with it; only a statement made when the key was made predates that.
    package var mayStandInForPassword: Bool { keyProtection == .pin }

    /// Creates a record; optional times default to "never", the tier to `software`.
    package init(
        kid: String, user: String, name: String, publicKeyPEM: String, status: DeviceStatus.Stored, createdAt: Int64,
        approvedAt: Int64? = nil, revokedAt: Int64? = nil, lastLoginAt: Int64? = nil, registeredFrom: String? = nil,
        tier: DeviceTier = .software, keyProtection: KeyProtection? = nil
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
        self.registeredFrom = registeredFrom
        self.tier = tier
        self.keyProtection = keyProtection
    }

    /// Where the device sits in a user's device list, which is ordered by creation time, then
    /// by `kid` for devices registered in the same second.
    package var listPosition: DeviceListPosition {
        DeviceListPosition(createdAt: createdAt, kid: kid)
    }
}

/// A place in a user's device list: the list continues with the devices after it in the order
/// (`created_at`, `kid`). Pagination cursors carry one, so a page never repeats or skips a
/// device even when devices are added or purged between requests.
package struct DeviceListPosition: Sendable, Hashable {
    /// The creation time of the last device already seen.
    package var createdAt: Int64
    /// Its `kid`.
    package var kid: String

    /// Creates a position.
    package init(createdAt: Int64, kid: String) {
        self.createdAt = createdAt
        self.kid = kid
    }

    /// Before every device: the position a listing starts from.
    package static let start = DeviceListPosition(createdAt: Int64.min, kid: "")
}

/// The condition under which ``ServerStorage/insertDevice(_:rule:)`` stores a device; the
/// storage checks it and inserts in one atomic step, so concurrent registrations cannot both
/// pass a check that only one of them should.
package enum DeviceInsertRule: Sendable, Hashable {
    /// No condition beyond the `kid` being free: a device enrolled with a one-time code.
    case unconditional
    /// The user has no device record at all: the first device of a new user under open
    /// enrollment. Two strangers racing for one unused name cannot both get an active device.
    case userHasNoDevices
    /// The user has fewer than `limit` pending devices created after `createdAfter` (the ones
    /// not yet expired): caps how many requests anyone can pile onto a user's approval list.
    case pendingBelow(limit: Int, createdAfter: Int64)
    /// The one-time code is usable by the user: used up in the same transaction as the insert,
    /// so that nothing (a `delete-user` of the user, say) comes between the code and the device.
    case usingCode(DeviceEnrollmentCode)
}

/// A one-time code that enrols a device at once (``DeviceInsertRule/usingCode(_:)``).
package enum DeviceEnrollmentCode: Sendable, Hashable {
    /// An enrollment code, by the stored hashes of each form it may have been typed in.
    case enrollment(hashes: [[UInt8]])
    /// One of the user's recovery codes, by its row (the server found it by its slow hash), the
    /// notice that tells the user's other active devices of the new one, and the code's use in
    /// the audit trail. The audit entry, and the notice when the user has such a device, are
    /// stored in the insert's transaction: the new device must never be active without them,
    /// even for the moment between two writes, or it could make codes or approve a device that
    /// denying the notice would not undo, or stay unaudited when the second write failed. The
    /// storage ends the entry's detail with the codes left (`, 9 codes left`), counted there.
    case recovery(code: RecoveryCodeRecord, notice: SignInRequestRecord, audit: AuditEvent)
}

/// What ``ServerStorage/insertDevice(_:rule:)`` did.
package enum DeviceInsertion: Sendable, Hashable {
    /// The device was stored.
    case inserted
    /// A device with the same `kid` exists (whoever owns it); nothing changed.
    case kidTaken
    /// `.userHasNoDevices` failed: the user has some device record; nothing changed.
    case userHasDevices
    /// `.pendingBelow` failed: the user's pending devices already reach the limit; carries the
    /// creation time of the oldest one that counts, whose expiry frees a place.
    case pendingLimitReached(oldestCreatedAt: Int64)
    /// `.usingCode` failed: the code is used, expired, another user's or gone; nothing changed.
    case codeNotUsable
}

/// What ``SignInStorage/approveDeviceSignInRequest(id:device:answeringKID:methods:at:askingSession:createdAfter:)``
/// did: ``approved`` and ``alreadyActive`` answered the request, the others changed nothing.
package enum DeviceRequestApprovalOutcome: Sendable, Hashable {
    /// The request is answered and used up, and the device is active.
    case approved
    /// The request is answered and used up; the device was already active (approved another
    /// way meanwhile), and stays so.
    case alreadyActive
    /// The request is not pending any more, expired, or its asking session is gone.
    case requestNotOpen
    /// The device is not the request's pending device, was denied or revoked, or its pending
    /// lifetime is over.
    case deviceNotPending
    /// The approving device is not active (revoked meanwhile).
    case approverNotActive
}

/// What ``ServerStorage/approvePendingDevice(kid:approvedBy:at:createdAfter:)`` did.
package enum DeviceApprovalOutcome: Sendable, Hashable {
    /// The device is active now.
    case approved
    /// The device does not exist, is no longer pending, or its pending lifetime is over;
    /// nothing changed.
    case notPending
    /// The approving device is not active (revoked meanwhile, or never was); nothing changed.
    case approverNotActive
}

/// One of the server's own signing keys, and where it is in its life (PROTOCOL.md section 3,
/// "Key rotation").
///
/// A key is *next* until ``activeFrom``, *current* from then until a newer key's `activeFrom`
/// passes, then *previous* (published, no longer signing) until the cleanup retires it once
/// every token it signed has expired. Retirement keeps the row for `keys list` and wipes the
/// private key. Which key signs is a function of these rows and the clock only, so every
/// instance on one database agrees without talking to the others.
package struct SigningKeyRecord: Sendable {
    /// The public key's thumbprint, used as `kid` in access tokens and the JWKS.
    package var kid: String
    /// The private key, PKCS#8 PEM; empty once the key is retired.
    ///
    /// - Warning: secret. SQLite storage keeps it in the database file (protect the file like a
    ///   key file); callers wipe this copy after parsing it.
    package var privatePEM: [UInt8]
    /// When it was created.
    package var createdAt: Int64
    /// The algorithm it signs with: RS256, ES256 or EdDSA.
    package var algorithm: JWSAlgorithm
    /// From when it may sign: its creation for a first key, creation plus the publication delay
    /// for a rotation, so that caches see it in the JWKS before any token names it.
    package var activeFrom: Int64
    /// When the cleanup retired it (it is then gone from the JWKS); nil while published.
    package var retiredAt: Int64?

    /// Creates a record; by default an RS256 key that may sign from its creation.
    package init(
        kid: String, privatePEM: [UInt8], createdAt: Int64, algorithm: JWSAlgorithm = .rs256,
        activeFrom: Int64? = nil, retiredAt: Int64? = nil
    ) {
        self.kid = kid
        self.privatePEM = privatePEM
        self.createdAt = createdAt
        self.algorithm = algorithm
        self.activeFrom = activeFrom ?? createdAt
        self.retiredAt = retiredAt
    }
}
