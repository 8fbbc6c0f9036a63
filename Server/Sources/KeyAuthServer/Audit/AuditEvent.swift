/// One administrative action, as the `audit_events` table keeps it and `keyauth-server audit`
/// prints it: who changed what, and when.
///
/// Nothing secret goes in: no enrollment or recovery code (only that one was issued or used, for
/// whom), no key material (only key IDs).
package struct AuditEvent: Sendable, Hashable {
    /// Seconds since 1970.
    package var time: Int64
    package var action: AuditAction
    /// Who acted: ``AuditActor``'s text (`admin`, `device:KID`).
    package var actor: String
    /// The user the action concerns, when one does.
    package var user: String?
    /// The device, signing key or client the action concerns, when one does.
    package var subject: String?
    /// Anything else worth keeping (a device's name, a client's URL), short and not secret.
    package var detail: String?

    /// Creates an event.
    package init(
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
package struct AuditAction: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    package let rawValue: String

    package init(rawValue: String) {
        self.rawValue = rawValue
    }

    package var description: String { rawValue }

    /// An enrollment code was issued for a user.
    package static let enroll = AuditAction(rawValue: "enroll")
    /// Outstanding enrollment codes of a user were revoked.
    package static let revokeCodes = AuditAction(rawValue: "revoke-codes")
    /// A user made a new set of recovery codes, replacing the old set.
    package static let recoveryCodes = AuditAction(rawValue: "recovery-codes")
    /// A recovery code enrolled a new device.
    package static let useRecoveryCode = AuditAction(rawValue: "use-recovery-code")
    /// A pending device was approved.
    package static let approve = AuditAction(rawValue: "approve")
    /// A pending device was denied.
    package static let deny = AuditAction(rawValue: "deny")
    /// An active device was revoked.
    package static let revoke = AuditAction(rawValue: "revoke")
    /// A user and all their devices and codes were deleted.
    package static let deleteUser = AuditAction(rawValue: "delete-user")
    /// The server's signing keys changed (a key added, retired or made the signing one).
    package static let rotateKey = AuditAction(rawValue: "rotate-key")
    /// A client (relying party) was registered.
    package static let addClient = AuditAction(rawValue: "add-client")
    /// A client was removed.
    package static let removeClient = AuditAction(rawValue: "remove-client")
    /// An authorization code was issued to a relying party for a signed-in user.
    package static let issueCode = AuditAction(rawValue: "issue-code")
    /// A relying party redeemed an authorization code for tokens.
    package static let redeemCode = AuditAction(rawValue: "redeem-code")
    /// An authorization code came a second time; the tokens of its first use were revoked.
    package static let reuseCode = AuditAction(rawValue: "reuse-code")
    /// A browser session was ended through `/end-session`.
    package static let endSession = AuditAction(rawValue: "end-session")
    /// A device approved a sign-in request (of a client, the account page, a relying party, or
    /// the account page's request to approve a new device).
    package static let approveSignIn = AuditAction(rawValue: "approve-sign-in")
    /// A device denied a sign-in request, or it was denied after wrong codes.
    package static let denySignIn = AuditAction(rawValue: "deny-sign-in")
    /// A device registered with TPM attestation; the detail is its tier, and for
    /// `tpm-unverified` why its endorsement key certificate did not make it `attested`.
    package static let attest = AuditAction(rawValue: "attest")
    /// A registered device attested again and its tier rose; the detail is the old and the new
    /// tier (`software -> attested`), and for `tpm-unverified` why it is not `attested`.
    package static let attestDevice = AuditAction(rawValue: "attest-device")
    /// A browser signed in to the account page (or through it, to a relying party).
    package static let browserSignIn = AuditAction(rawValue: "browser-sign-in")
    /// A device logged in to a Linux host through `pam_keyauth`, as its assertion states.
    package static let hostLogin = AuditAction(rawValue: "host-login")
}

/// Who performed an audited action.
package enum AuditActor: Sendable, Equatable, CustomStringConvertible {
    /// The operator, through a `keyauth-server` command.
    case administrator
    /// A user's device, through the HTTP API with its access token.
    case device(kid: String)
    /// A user on the account page, in a session that the device `kid` approved.
    case accountPage(approvedBy: String)
    /// A relying party, authenticated at the token endpoint (or named by a public client's id).
    case client(id: String)

    /// The device whose authority the action rests on: one that must still be active for the
    /// action to take effect. Nil for the operator and a relying party.
    package var deviceKID: String? {
        switch self {
        case .device(let kid), .accountPage(let kid): kid
        case .administrator, .client: nil
        }
    }

    package var description: String {
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
package struct AuditTrail: Sendable {
    let storage: any ServerStorage
    let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - storage: where events are kept.
    ///   - now: the clock.
    package init(storage: any ServerStorage, now: @escaping @Sendable () -> Int64 = ServerClock.now) {
        self.storage = storage
        self.now = now
    }

    /// Records that `actor` did `action`.
    ///
    /// - Throws: ``StorageError``; the change itself was already made, so a caller reports the
    ///   failure rather than undoing it.
    package func record(
        _ action: AuditAction, by actor: AuditActor, user: String? = nil, subject: String? = nil, detail: String? = nil
    ) throws(StorageError) {
        try storage.insertAuditEvent(
            AuditEvent(
                time: now(), action: action, actor: actor.description, user: user, subject: subject, detail: detail))
    }

    /// The events at or after `time`, oldest first.
    package func events(since time: Int64) throws(StorageError) -> [AuditEvent] {
        try storage.auditEvents(since: time)
    }
}
