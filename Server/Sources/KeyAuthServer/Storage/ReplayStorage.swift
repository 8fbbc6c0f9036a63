/// The replay cache: what was accepted once and must not be again (device assertions, DPoP
/// proofs, sealed authorization requests), and the rows a memory replay cache keeps beside it.
/// Part of ``ServerStorage``; in its own protocol so that the table's operations are found
/// together.
package protocol ReplayStorage: Sendable {
    /// Records that the assertion `jti` of key `keyID` was accepted, until `expiresAt`.
    ///
    /// - Returns: false when the pair was already recorded. Implementations insert and detect
    ///   the unique-constraint conflict; they never read first, or two concurrent replays could
    ///   both succeed.
    func claimJTI(keyID: String, jti: String, expiresAt: Int64) throws(StorageError) -> Bool

    /// Whether the pair is recorded, expired or not: a read that decides nothing by itself (a
    /// claim is always ``claimJTI(keyID:jti:expiresAt:)``), for a page that should tell a
    /// request answered already from one still open before the user acts on it.
    func isJTIClaimed(keyID: String, jti: String) throws(StorageError) -> Bool

    /// Forgets replay-cache entries whose `expiresAt` is before `now`; returns how many.
    @discardableResult
    func purgeExpiredJTIs(now: Int64) throws(StorageError) -> Int

    /// Whether several servers may share this store (PostgreSQL), so that replay claims must
    /// be kept in it rather than in one server's memory.
    var sharesReplayClaims: Bool { get }

    /// The rows a memory replay cache (``ReplayGuard``) keeps in the replay cache's table: its
    /// markers and the entries it saved at its last clean stop.
    func replaySnapshot() throws(StorageError) -> [ReplaySnapshotRow]

    /// Replaces those rows with the rows of `snapshot`, in one durable transaction.
    func replaceReplaySnapshot(with snapshot: ReplaySnapshot) throws(StorageError)

    /// Sets the snapshot's row `row.name` to the later of its stored expiry and `row.expiresAt`
    /// (adding it when it is missing), durably: the lease of a memory replay cache, which must
    /// never move back.
    func raiseReplaySnapshotRow(_ row: ReplaySnapshotRow) throws(StorageError)

    /// The claims recorded in the table (not the snapshot's rows) that expire at `time` or
    /// later: what a memory replay cache takes over from a server that kept them in the database.
    func claimedJTIs(expiringAfter time: Int64) throws(StorageError) -> [ClaimedJTI]
}
