/// Everything `keyauth-server` keeps: devices, the replay cache, enrollment codes and the
/// server's own signing keys.
///
/// The protocol is synchronous on purpose. libmicrohttpd calls the server on its own worker
/// threads, one request per thread at a time, and expects an answer before that callback
/// returns; there is no event loop to hand a suspended task back to. An `async` storage would
/// force every request to block its worker on a semaphore while a task runs elsewhere, which costs
/// a thread hop per query and risks exhausting Swift's cooperative pool under load. Blocking the
/// worker directly on a database call is what the thread pool is for. Implementations must be
/// safe to call from many threads at once (hence `Sendable`).
///
/// Every state change that two requests could race on is one atomic statement: a unique
/// constraint for the replay cache and device keys, a conditional `UPDATE` for status changes
/// and enrollment codes. No implementation may check with a read and then write.
///
/// Every method throws ``StorageError`` when the store cannot be reached or fails; the server
/// answers those with 503 `temporarily_unavailable`, never as a client error.
public protocol ServerStorage: Sendable {
    // MARK: Devices

    /// Adds a device; returns false, changing nothing, when a device with the same `kid` exists
    /// (whoever owns it), so that the caller can tell an idempotent retry from a conflict.
    func insertDevice(_ device: DeviceRecord) throws(StorageError) -> Bool

    /// The device registered under `kid` (its key fingerprint), in any state.
    func device(kid: String) throws(StorageError) -> DeviceRecord?

    /// All devices of `user`, oldest first; devices registered in the same second by `kid`.
    func devices(user: String) throws(StorageError) -> [DeviceRecord]

    /// All devices of all users, for the administrator's view, ordered by user then age.
    func allDevices() throws(StorageError) -> [DeviceRecord]

    /// Whether `user` has at least one `active` device: decides whether a new device is the
    /// user's first (active at once) or needs approval.
    func hasActiveDevice(user: String) throws(StorageError) -> Bool

    /// Moves a device from `expected` to `status` in one atomic step.
    ///
    /// Sets `approved_at` when the new status is `active` and `revoked_at` when it is `revoked`
    /// or `denied`.
    /// - Returns: false when the device does not exist or is no longer in `expected` (someone
    ///   else changed it first), so a revocation can never be undone by a late approval.
    func updateStatus(
        kid: String, from expected: DeviceStatus, to status: DeviceStatus, at time: Int64
    ) throws(StorageError) -> Bool

    /// Records a successful login of the device `kid` at `time`.
    ///
    /// `last_login_at` is informational, so unlike every other write it need not be durable
    /// when this returns: an implementation may keep it in memory and write it with later writes
    /// (SQLite does, for at most a second), as long as its own reads show it at once. After a
    /// crash it may then lag by that delay; nothing a client was answered depends on it.
    func recordLogin(kid: String, at time: Int64) throws(StorageError)

    // MARK: Replay cache

    /// Records that the assertion `jti` of key `keyID` was accepted, until `expiresAt`.
    ///
    /// - Returns: false when the pair was already recorded. Implementations insert and detect
    ///   the unique-constraint conflict; they never read first, or two concurrent replays could
    ///   both succeed.
    func claimJTI(keyID: String, jti: String, expiresAt: Int64) throws(StorageError) -> Bool

    /// Forgets replay-cache entries whose `expiresAt` is before `now`; returns how many.
    @discardableResult
    func purgeExpiredJTIs(now: Int64) throws(StorageError) -> Int

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

    // MARK: Server signing keys

    /// The server's signing keys, oldest first. The oldest signs; all are published.
    ///
    /// - Warning: the records hold private keys in PEM; callers wipe them after parsing.
    func signingKeys() throws(StorageError) -> [SigningKeyRecord]

    /// Adds a signing key; returns false when one with the same `kid` exists.
    ///
    /// Two servers starting at once on an empty store may both insert a key; both then sign
    /// with the oldest one, so their tokens stay interchangeable.
    func insertSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool

    /// Adds a signing key only when the store has none yet, in one atomic step; returns false
    /// (changing nothing) when some key already exists.
    ///
    /// Servers starting at once on an empty store each generate a key; this makes exactly one
    /// of them the signing key, so every instance signs with, and publishes, the same key.
    func insertFirstSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool

    // MARK: Operations

    /// Runs a trivial query, for `/healthz`.
    func healthCheck() throws(StorageError)

    /// Releases connections; later calls throw. Called once on shutdown.
    func close()
}
