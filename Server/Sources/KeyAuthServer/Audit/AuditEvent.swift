/// One administrative action, as the `audit_events` table keeps it and `keyauth-server audit`
/// prints it: who changed what, and when.
///
/// Nothing secret goes in: no enrollment code (only that one was issued, for whom), no key
/// material (only key IDs).
public struct AuditEvent: Sendable, Equatable {
    /// Seconds since 1970.
    public var time: Int64
    public var action: AuditAction
    /// Who acted: ``AuditActor``'s text (`admin`, `device:KID`).
    public var actor: String
    /// The user the action concerns, when one does.
    public var user: String?
    /// The device, signing key or client the action concerns, when one does.
    public var subject: String?
    /// Anything else worth keeping (a device's name, a client's URL), short and not secret.
    public var detail: String?

    /// Creates an event.
    public init(
        time: Int64, action: AuditAction, actor: String, user: String? = nil, subject: String? = nil,
        detail: String? = nil
    ) {
        self.time = time
        self.action = action
        self.actor = actor
        self.user = user
        self.subject = subject
        self.detail = detail
    }
}

/// What an audited action did, as stored: a short stable word, so that other features add
/// actions without a change to the table or to this type's users.
public struct AuditAction: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// An enrollment code was issued for a user.
    public static let enroll = AuditAction(rawValue: "enroll")
    /// Outstanding enrollment codes of a user were revoked.
    public static let revokeCodes = AuditAction(rawValue: "revoke-codes")
    /// A pending device was approved.
    public static let approve = AuditAction(rawValue: "approve")
    /// A pending device was denied.
    public static let deny = AuditAction(rawValue: "deny")
    /// An active device was revoked.
    public static let revoke = AuditAction(rawValue: "revoke")
    /// A user and all their devices and codes were deleted.
    public static let deleteUser = AuditAction(rawValue: "delete-user")
    /// The server's signing keys changed (a key added, retired or made the signing one).
    public static let rotateKey = AuditAction(rawValue: "rotate-key")
    /// A client (relying party) was registered.
    public static let addClient = AuditAction(rawValue: "add-client")
    /// A client was removed.
    public static let removeClient = AuditAction(rawValue: "remove-client")
    /// An authorization code was issued to a relying party for a signed-in user.
    public static let issueCode = AuditAction(rawValue: "issue-code")
    /// A relying party redeemed an authorization code for tokens.
    public static let redeemCode = AuditAction(rawValue: "redeem-code")
    /// An authorization code came a second time; the tokens of its first use were revoked.
    public static let reuseCode = AuditAction(rawValue: "reuse-code")
    /// A browser session was ended through `/end-session`.
    public static let endSession = AuditAction(rawValue: "end-session")
    /// A device approved a sign-in request (of a client, the account page, a relying party, or
    /// the account page's request to approve a new device).
    public static let approveSignIn = AuditAction(rawValue: "approve-sign-in")
    /// A device denied a sign-in request, or it was denied after wrong codes.
    public static let denySignIn = AuditAction(rawValue: "deny-sign-in")
    /// A browser signed in to the account page (or through it, to a relying party).
    public static let browserSignIn = AuditAction(rawValue: "browser-sign-in")
}

/// Who performed an audited action.
public enum AuditActor: Sendable, Equatable, CustomStringConvertible {
    /// The operator, through a `keyauth-server` command.
    case administrator
    /// A user's device, through the HTTP API with its access token.
    case device(kid: String)
    /// A user on the account page, in a session that the device `kid` approved.
    case accountPage(approvedBy: String)
    /// A relying party, authenticated at the token endpoint (or named by a public client's id).
    case client(id: String)

    public var description: String {
        switch self {
        case .client(let id): "client:\(id)"
        case .administrator: "admin"
        case .device(let kid): "device:\(kid)"
        case .accountPage(let kid): "account-page:\(kid)"
        }
    }
}

/// Records audited actions in storage, stamped with the clock.
///
/// Features call ``record(_:by:user:subject:detail:)`` after the change they audit has been
/// made: key rotation (`keys rotate`) and client changes (`clients add|remove`) as well as the
/// device and enrollment actions here.
public struct AuditTrail: Sendable {
    let storage: any ServerStorage
    let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - storage: where events are kept.
    ///   - now: the clock.
    public init(storage: any ServerStorage, now: @escaping @Sendable () -> Int64 = ServerClock.now) {
        self.storage = storage
        self.now = now
    }

    /// Records that `actor` did `action`.
    ///
    /// - Throws: ``StorageError``; the change itself was already made, so a caller reports the
    ///   failure rather than undoing it.
    public func record(
        _ action: AuditAction, by actor: AuditActor, user: String? = nil, subject: String? = nil, detail: String? = nil
    ) throws(StorageError) {
        try storage.insertAuditEvent(
            AuditEvent(
                time: now(), action: action, actor: actor.description, user: user, subject: subject, detail: detail))
    }

    /// The events at or after `time`, oldest first.
    public func events(since time: Int64) throws(StorageError) -> [AuditEvent] {
        try storage.auditEvents(since: time)
    }
}
