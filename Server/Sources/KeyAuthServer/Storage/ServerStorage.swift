import KeyAuth

/// Everything `keyauth-server` keeps: devices, the replay cache (``ReplayStorage``), enrollment codes, the
/// server's own signing keys, the tables of sign-in by approval (``SignInStorage``) and of the
/// OpenID Connect provider (``AuthorizationStorage``).
///
/// The protocol is synchronous on purpose. libmicrohttpd calls the server on its own worker
/// threads, one request per thread at a time; an `async` storage would force every request to
/// block its worker on a semaphore while a task runs elsewhere, which costs a thread hop per
/// query and risks exhausting Swift's cooperative pool under load. Statements take microseconds;
/// what takes milliseconds is making a write durable, and that wait need not hold a thread: with
/// SQLite, inside the transport's ``DurabilityScope``, a write returns once it has run and the
/// transport suspends the connection until the write is durable. PostgreSQL's writes block their
/// thread, and its servers run more threads for it (``writesBlockUntilDurable``).
/// Implementations must be safe to call from many threads at once (hence `Sendable`).
///
/// Every state change that two requests could race on is one atomic step: a unique constraint
/// for the replay cache and device keys, a conditional `UPDATE` for status changes and
/// enrollment codes, and for conditional device inserts a check made under the write lock
/// that the insert holds (SQLite's single writer, a per-user advisory lock in PostgreSQL). No
/// implementation may check with a read outside that lock and then write.
///
/// Every method throws ``StorageError`` when the store cannot be reached or fails; the server
/// answers those with 503 `temporarily_unavailable`, never as a client error.
package protocol ServerStorage: ReplayStorage, SignInStorage, AuthorizationStorage {
    // MARK: Devices

    /// Adds a device if `rule` holds, checking the rule and inserting in one atomic step.
    ///
    /// Registration decides between active, pending and refused from what the user already
    /// has; without this, two requests could both see room under the pending cap (or both see
    /// an unused user name) and both insert. The `kid` is checked first: a device with the same
    /// `kid`, whoever owns it, gives `.kidTaken` whatever the rule, so that the caller can tell
    /// an idempotent retry from a refusal.
    func insertDevice(_ device: DeviceRecord, rule: DeviceInsertRule) throws(StorageError) -> DeviceInsertion

    /// The device registered under `kid` (its key fingerprint), in any state.
    func device(kid: String) throws(StorageError) -> DeviceRecord?

    /// The device `kid` for a login: as ``device(kid:)``, and as current for every decision
    /// (a change any keyauth process committed before the call is seen), but perhaps kept in
    /// memory, so its `lastLoginAt` may lag. Only logins call it.
    func loginDevice(kid: String) throws(StorageError) -> DeviceRecord?

    /// Up to `limit` devices of `user` that come after `position` in the order (`created_at`,
    /// `kid`): oldest first, devices registered in the same second by `kid` in byte order.
    func devices(user: String, after position: DeviceListPosition, limit: Int) throws(StorageError) -> [DeviceRecord]

    /// All devices of all users, for the administrator's view, ordered by user then age.
    func allDevices() throws(StorageError) -> [DeviceRecord]

    /// The states found among `user`'s stored devices; empty for a user the server does not
    /// know (never registered, or only records that were purged).
    ///
    /// Registration reads it to tell a new user from an existing one (any record, even revoked)
    /// and an existing user who can still approve (an `active` device) from one who cannot.
    func deviceStatuses(user: String) throws(StorageError) -> Set<DeviceStatus.Stored>

    /// Moves a device from `expected` to `status` in one atomic step, and nothing else: a
    /// revocation or denial goes through ``revokeOrDeny(kid:from:to:at:audit:)``, which also ends
    /// the device's sessions and records it; tests use this one to set a state.
    ///
    /// Sets `approved_at` when the new status is `active` and `revoked_at` when it is `revoked`
    /// or `denied`.
    /// - Returns: false when the device does not exist or is no longer in `expected` (someone
    ///   else changed it first), so a revocation can never be undone by a late approval.
    func updateStatus(
        kid: String, from expected: DeviceStatus.Stored, to status: DeviceStatus.Stored, at time: Int64
    ) throws(StorageError) -> Bool

    /// Revokes the active device `kid` or denies the pending one (`status` `revoked` or `denied`,
    /// from `expected`) as ``updateStatus(kid:from:to:at:)`` moves it, and in the same
    /// transaction deletes the browser sessions a revoked device approved and records `audit`.
    ///
    /// A failure leaves nothing changed, so the caller's retry does it all: a revocation done in
    /// separate writes could be left unaudited, and its retry finds the device revoked already.
    /// - Returns: false, with nothing written, when the device is no longer `expected`.
    func revokeOrDeny(
        kid: String, from expected: DeviceStatus.Stored, to status: DeviceStatus.Stored, at time: Int64,
        audit: AuditEvent
    ) throws(StorageError) -> Bool

    /// Moves the pending device `kid` to active if the device `approverKID` is still active when
    /// the change commits (nil: the administrator, whom nothing revokes), and sets `approved_at`.
    ///
    /// Only a device created after `oldestLive` (its pending lifetime not yet over at `time`) is
    /// approved: the expiry is checked in the same statement that approves, so an approval whose
    /// earlier check passed cannot activate a registration its client has since been told
    /// expired.
    ///
    /// The approver's row is locked until the commit (PostgreSQL's `FOR SHARE`; SQLite has one
    /// writer), so a revocation of the approver either commits first, and the approval finds it
    /// revoked, or waits for the approval: once a revocation has returned, the revoked device
    /// approves nothing, however the two requests interleave.
    func approvePendingDevice(
        kid: String, approvedBy approverKID: String?, at time: Int64, createdAfter oldestLive: Int64
    ) throws(StorageError) -> DeviceApprovalOutcome

    /// Gives the device `kid` a new `name`; false when there is no such device.
    func renameDevice(kid: String, name: String) throws(StorageError) -> Bool

    /// Sets the tier of device `kid` to `tier` if it is still `expected`, in one statement, so
    /// that of two attestations at once neither writes over what the other read.
    ///
    /// - Returns: false when there is no such device or its tier is no longer `expected`.
    func raiseTier(kid: String, from expected: DeviceTier, to tier: DeviceTier) throws(StorageError) -> Bool

    /// Records a successful login of the device `kid` at `time`.
    ///
    /// `last_login_at` is informational, so unlike every other write it need not be durable
    /// when this returns: an implementation may keep it in memory and write it with later writes
    /// (SQLite does, for at most a second), as long as its own reads show it at once. After a
    /// crash it may then lag by that delay; nothing a client was answered depends on it.
    func recordLogin(kid: String, at time: Int64) throws(StorageError)

    /// Deletes pending devices created before `pendingCreatedBefore` and denied devices denied
    /// (`revoked_at`) before `deniedBefore`; returns how many. Active and revoked devices stay:
    /// a revoked record is the history that keeps its user an existing user.
    @discardableResult
    func purgeDevices(pendingCreatedBefore: Int64, deniedBefore: Int64) throws(StorageError) -> Int

    // MARK: Enrollment codes

    /// Stores the SHA-256 `hash` of a one-time enrollment code for `user`. The code itself is
    /// never stored, so a copy of the database cannot enroll anyone.
    func insertEnrollmentCode(hash: [UInt8], user: String, expiresAt: Int64) throws(StorageError)

    /// Uses up the code with SHA-256 `hash` if it belongs to `user`, is unused and has not
    /// expired at `now`, in one atomic step.
    ///
    /// - Returns: false for an unknown, used, expired or other user's code (which stays usable
    ///   by its own user).
    func consumeEnrollmentCode(hash: [UInt8], user: String, now: Int64) throws(StorageError) -> Bool

    /// Forgets enrollment codes that expired before `now` or were used; returns how many.
    @discardableResult
    func purgeExpiredEnrollmentCodes(now: Int64) throws(StorageError) -> Int

    /// The enrollment codes still usable at `now` (unused, not expired), soonest to expire first.
    func enrollmentCodes(usableAt now: Int64) throws(StorageError) -> [EnrollmentCodeRecord]

    /// Deletes `user`'s unused enrollment codes; returns how many.
    @discardableResult
    func deleteEnrollmentCodes(user: String) throws(StorageError) -> Int

    // MARK: Recovery codes

    /// Replaces every recovery code of `user` (used or not) with `codes`, in one transaction.
    ///
    /// With `activeDevice`, only if that device (the one that asked for the codes, or approved
    /// the account page's request) is active when the transaction commits: the codes take a
    /// while to hash, and a revocation that answered in the meantime must leave the revoked
    /// device nothing that enrols a device. Returns false, changing nothing, when it is not.
    ///
    /// `audit`, when given, is stored in the same transaction: a failure after the old set was
    /// gone but before the new one was recorded would leave the user with printed codes that no
    /// longer work and new ones never shown.
    ///
    /// With `askingSession` (the account page's session that asked, and the time), only if that
    /// session is still signed in by an active device: the user who revoked the device that
    /// signed it in, while the codes were hashed, was told the session ended.
    @discardableResult
    func replaceRecoveryCodes(
        user: String, with codes: [RecoveryCodeRecord], whileActive activeDevice: String?,
        askedBy askingSession: (idHash: [UInt8], at: Int64)?, audit: AuditEvent?
    ) throws(StorageError) -> Bool

    /// `user`'s recovery codes not used yet, oldest first, with the ids storage gave them.
    func unusedRecoveryCodes(user: String) throws(StorageError) -> [RecoveryCodeRecord]

    /// Uses up the recovery code `code` (its row: id, user and hash) at `time` in one atomic
    /// step; false when it is used already, replaced, or not its user's. The hash takes part:
    /// SQLite may give a new set the ids of the set it replaced.
    func consumeRecoveryCode(_ code: RecoveryCodeRecord, at time: Int64) throws(StorageError) -> Bool

    // MARK: Users

    /// Deletes every device record, enrollment code and recovery code of `user` in one
    /// transaction, with the user's sign-in requests, browser sessions and unredeemed
    /// authorization codes; returns how many devices and enrollment codes. The user is then
    /// unknown to the server, as if never registered, and an approval made before is gone too.
    ///
    /// In the same transaction the keys of the user's active and revoked devices (those that may
    /// hold SSH certificates) go into the SSH revocation keys, listed until `until` (a key listed
    /// already keeps the later time), so that no certificate of a deleted device is valid again.
    @discardableResult
    func deleteUser(_ user: String, listingSSHKeysUntil until: Int64) throws(StorageError) -> (devices: Int, codes: Int)

    // MARK: SSH revocation keys

    /// The keys ``deleteUser(_:listingSSHKeysUntil:)`` listed whose time is after `now`, by `kid`.
    func sshRevokedKeys(listedAfter now: Int64) throws(StorageError) -> [SSHRevokedKeyRecord]

    /// Forgets the listed keys whose time is `now` or before; returns how many.
    @discardableResult
    func purgeSSHRevokedKeys(now: Int64) throws(StorageError) -> Int

    // MARK: SSH certificates issued

    /// Records a certificate issued; false when its serial is recorded already (drawn again).
    func recordSSHCertificate(_ record: SSHCertificateRecord) throws(StorageError) -> Bool

    /// The certificates recorded whose `valid before` is after `time`, by serial.
    func sshCertificates(validAfter time: Int64) throws(StorageError) -> [SSHCertificateRecord]

    /// Forgets the certificates whose `valid before` is `time` or before; returns how many.
    @discardableResult
    func purgeSSHCertificates(validUntil time: Int64) throws(StorageError) -> Int

    // MARK: Server signing keys

    /// The server's signing keys, in the order they took over signing (`active_from`, then
    /// `created_at`, then `kid`); retired keys only when `includingRetired`.
    ///
    /// - Warning: the records hold private keys in PEM; callers wipe them after parsing.
    func signingKeys(includingRetired: Bool) throws(StorageError) -> [SigningKeyRecord]

    /// Adds a signing key; returns false when one with the same `kid` exists.
    func insertSigningKey(_ record: SigningKeyRecord) throws(StorageError) -> Bool

    /// Adds a signing key only when the store has none yet (retired ones included), in one
    /// atomic step; returns false (changing nothing) when some key already exists.
    ///
    /// Servers starting at once on an empty store each generate a key; this makes exactly one
    /// of them the signing key, so every instance signs with, and publishes, the same key.
    func insertFirstSigningKey(_ record: SigningKeyRecord) throws(StorageError) -> Bool

    /// Adds `record`, an RS256 key for ID tokens, only when no unretired RS256 key exists, in one
    /// atomic step under the first signing key's lock; false (changing nothing) when one does.
    ///
    /// Servers of another token algorithm starting at once each make one; with a check apart
    /// from the insert, both inserted, and the one that sorted first was retired at once by the
    /// other's cleanup while its server still signed ID tokens with it.
    func insertIDTokenKey(_ record: SigningKeyRecord) throws(StorageError) -> Bool

    /// Retires the key `kid` at `time`: it leaves the JWKS, and its private key is wiped from
    /// the store (the row stays, for `keys list`). Returns false when it is unknown or already
    /// retired.
    func retireSigningKey(kid: String, at time: Int64) throws(StorageError) -> Bool

    // MARK: Audit

    /// Appends an administrative action to the audit trail (``AuditTrail``). Events are never
    /// changed or purged by the server.
    func insertAuditEvent(_ event: AuditEvent) throws(StorageError)

    /// The audit events at or after `time`, oldest first (in the order recorded within a second).
    func auditEvents(since time: Int64) throws(StorageError) -> [AuditEvent]

    // MARK: Operations

    /// Whether a write holds its caller's thread until it is durable (PostgreSQL), rather than
    /// returning once it has run and leaving the wait for durability to a ``DurabilityScope``
    /// (SQLite's group commit). The HTTP transport sizes its thread pool by it.
    var writesBlockUntilDurable: Bool { get }

    /// Runs a trivial query, for `/healthz`.
    func healthCheck() throws(StorageError)

    /// The database server's clock in seconds since 1970, when the database runs on a machine of
    /// its own that several servers share (PostgreSQL); nil for a SQLite file, whose servers are
    /// on its host and so on one clock. `serve` compares it with its own (``ClockSkewCheck``).
    func databaseTime() throws(StorageError) -> Int64?

    /// Writes `instance`'s row of the health probes durably, for `/healthz`: whether the store
    /// takes a write now, which no read can tell (a full disk, a read-only file system and a
    /// PostgreSQL standby all answer reads).
    ///
    /// The write must reach the log as any write does: a transaction that rolled back, or one
    /// that changed nothing, proves nothing about room on the disk. So each call changes the row
    /// (a counter) and commits; the row is rewritten in place, so probing never grows the
    /// store, and rows of instances that stopped probing a week before `time` are deleted.
    /// Returns once the write is durable, even inside a ``DurabilityScope``: its outcome is
    /// the answer. Each call costs a commit and, with SQLite, an fsync, so callers limit how
    /// often it runs (``StorageWriteProbe``).
    func probeWrite(instance: String, at time: Int64) throws(StorageError)

    /// Releases connections; later calls throw. Called once on shutdown.
    func close()
}

extension ServerStorage {
    /// ``replaceRecoveryCodes(user:with:whileActive:askedBy:audit:)`` with no device to check and
    /// no audit entry (tests).
    func replaceRecoveryCodes(user: String, with codes: [RecoveryCodeRecord]) throws(StorageError) {
        try replaceRecoveryCodes(user: user, with: codes, whileActive: nil, askedBy: nil, audit: nil)
    }

    /// ``replaceRecoveryCodes(user:with:whileActive:askedBy:audit:)`` without a session to check.
    @discardableResult
    func replaceRecoveryCodes(
        user: String, with codes: [RecoveryCodeRecord], whileActive activeDevice: String?, audit: AuditEvent?
    ) throws(StorageError) -> Bool {
        try replaceRecoveryCodes(user: user, with: codes, whileActive: activeDevice, askedBy: nil, audit: audit)
    }

    /// The published (not retired) signing keys, in the order they took over signing.
    ///
    /// - Warning: the records hold private keys in PEM; callers wipe them after parsing.
    package func signingKeys() throws(StorageError) -> [SigningKeyRecord] {
        try signingKeys(includingRetired: false)
    }

    /// Adds an RS256 signing key that may sign from its creation; false when the `kid` exists.
    package func insertSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        try insertSigningKey(SigningKeyRecord(kid: kid, privatePEM: privatePEM, createdAt: createdAt))
    }

    /// ``insertFirstSigningKey(_:)`` for an RS256 key that may sign from its creation.
    package func insertFirstSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError)
        -> Bool
    {
        try insertFirstSigningKey(SigningKeyRecord(kid: kid, privatePEM: privatePEM, createdAt: createdAt))
    }

    /// Adds a device unless its `kid` is taken; false, changing nothing, when a device with the
    /// same `kid` exists (whoever owns it).
    package func insertDevice(_ device: DeviceRecord) throws(StorageError) -> Bool {
        try insertDevice(device, rule: .unconditional) == .inserted
    }

    /// Every device of `user`, oldest first, read page by page.
    package func devices(user: String) throws(StorageError) -> [DeviceRecord] {
        var all: [DeviceRecord] = []
        var position = DeviceListPosition.start
        while true {
            let page = try devices(user: user, after: position, limit: 500)
            all += page
            guard page.count == 500, let last = page.last else { return all }
            position = last.listPosition
        }
    }

    /// Whether `user` has at least one `active` device, which could approve a new one.
    package func hasActiveDevice(user: String) throws(StorageError) -> Bool {
        try deviceStatuses(user: user).contains(.active)
    }
}

/// A row of a memory replay cache's snapshot: a marker's name or an entry (16 hex digits),
/// and until when it counts.
package struct ReplaySnapshotRow: Sendable, Equatable {
    package let name: String
    package let expiresAt: Int64
}

/// What a memory replay cache hands its successor (``ServerStorage/replaceReplaySnapshot(with:)``):
/// rows as they are (markers), and entries by expiry bucket, which become rows only as they are
/// written, since a busy server holds millions of them and rows made all at once (about 110
/// bytes each) made a clean stop the moment of its largest memory.
package struct ReplaySnapshot: Sendable {
    package var markers: [ReplaySnapshotRow]
    /// Each bucket's last second and its entries (shared with the cache, not copied).
    package var buckets: [(expiresAt: Int64, entries: Set<UInt64>)]

    package init(markers: [ReplaySnapshotRow], buckets: [(expiresAt: Int64, entries: Set<UInt64>)] = []) {
        self.markers = markers
        self.buckets = buckets
    }

    /// The markers, then a row for each entry, named by ``name(of:)``, made as they are read.
    package var rows: some Sequence<ReplaySnapshotRow> {
        let entries = buckets.lazy.flatMap { bucket in
            bucket.entries.lazy.map { ReplaySnapshotRow(name: Self.name(of: $0), expiresAt: bucket.expiresAt) }
        }
        return [AnySequence(markers), AnySequence(entries)].joined()
    }

    /// An entry's row name: its 16 hexadecimal digits, big-endian, as ``ReplayGuard`` reads them.
    package static func name(of entry: UInt64) -> String {
        withUnsafeBytes(of: entry.bigEndian) { Hex.encode($0) }
    }
}

/// A `jti` claimed in the replay cache's table.
package struct ClaimedJTI: Sendable, Equatable {
    package let keyID: String
    package let jti: String
    package let expiresAt: Int64
}
