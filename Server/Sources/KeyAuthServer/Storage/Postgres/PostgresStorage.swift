import KeyAuth

/// ``ServerStorage`` in a PostgreSQL database shared by several `keyauth-server` instances.
///
/// Everything that makes the instances one service lives in the database: devices and their
/// states, the replay cache, enrollment codes and the server signing keys. So a `jti` accepted
/// by one instance is refused by all, a code works once in total, and a token signed by one
/// instance verifies on every other. Each race is settled in the database: a primary key with
/// `ON CONFLICT DO NOTHING` for claims and inserts, a conditional `UPDATE` for status changes
/// and codes, checked by the affected-row count, and a per-user advisory lock around the check
/// and insert of a conditional device insert (the pending cap).
///
/// Semantics, ordering and units are those of ``SQLiteStorage``; one test suite runs against
/// both. Every statement is parameterised and runs on a small pool of libpq connections that
/// reconnects by itself when the database comes back. While it is down, methods throw
/// `.unavailable`, which the server answers with 503 `temporarily_unavailable`.
///
/// - Warning: the server's private signing keys are stored in the database (`signing_keys`):
///   whoever can read that table can sign access tokens. Restrict it to the service's role,
///   and treat backups of the database as secrets.
public final class PostgresStorage: ServerStorage {
    private let pool: PostgresConnectionPool

    /// The database URL with its password masked, for logs and messages.
    public let location: String

    /// Connects to the database at `url` and applies migrations.
    ///
    /// - Parameters:
    ///   - url: `postgres://user:password@host:port/dbname`, optionally with libpq query
    ///     parameters (`?sslmode=require`). A `connect_timeout` of 3 s applies unless it sets one.
    ///   - poolSize: connections kept open; each server request thread holds one per call.
    ///   - checkoutTimeoutSeconds: how long a call waits for a free connection before failing
    ///     with `.unavailable`.
    ///   - now: the clock, for the migration record.
    /// - Throws: ``StorageError`` with `.unavailable` when the database cannot be reached,
    ///   `.schemaTooNew` when a newer server migrated it, `.queryFailed` when migrating fails.
    public init(
        url: String, poolSize: Int = 4, checkoutTimeoutSeconds: Int = 10,
        now: @Sendable () -> Int64 = { ServerClock.now() }
    ) throws(StorageError) {
        let location = PostgresLocation(url)
        self.location = location.redacted
        pool = PostgresConnectionPool(
            location: location, size: poolSize, checkoutTimeoutSeconds: checkoutTimeoutSeconds)
        // Migrating is one transaction that checks the version first, so it is safe to repeat.
        try pool.withConnection(retryingIfBroken: true) { connection throws(StorageError) in
            try PostgresSchema.migrate(connection, now: now())
        }
    }

    /// `url` with its password masked, for logging a `--db` value before connecting.
    public static func redacted(_ url: String) -> String {
        PostgresLocation(url).redacted
    }

    // MARK: Connection access

    /// Work that changes nothing, retried once when its connection turns out to be broken.
    private func read<Result: Sendable>(
        _ body: (PostgresConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try pool.withConnection(retryingIfBroken: true, body)
    }

    /// Work that changes data: never retried, since it may have committed before the break.
    private func write<Result: Sendable>(
        _ body: (PostgresConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try pool.withConnection(retryingIfBroken: false, body)
    }

    // MARK: Devices

    private static let deviceColumns =
        "kid, user_name, name, public_key_pem, status, created_at, approved_at, revoked_at, last_login_at, registered_from"

    private static func devices(from result: PostgresResult) throws(StorageError) -> [DeviceRecord] {
        var devices: [DeviceRecord] = []
        devices.reserveCapacity(result.rowCount)
        for row in 0..<result.rowCount {
            guard let kid = result.text(row, 0), let user = result.text(row, 1), let name = result.text(row, 2),
                let pem = result.text(row, 3), let status = result.text(row, 4).flatMap(DeviceStatus.init(rawValue:)),
                let createdAt = result.integer(row, 5)
            else { throw StorageError(.queryFailed, "a device row is incomplete") }
            devices.append(
                DeviceRecord(
                    kid: kid, user: user, name: name, publicKeyPEM: pem, status: status, createdAt: createdAt,
                    approvedAt: result.integer(row, 6), revokedAt: result.integer(row, 7),
                    lastLoginAt: result.integer(row, 8), registeredFrom: result.text(row, 9)))
        }
        return devices
    }

    /// The first key of the two-key advisory locks that serialise conditional device inserts
    /// per user (the second is the user name's hash): "keyd" in ASCII. The two-key form is a
    /// key space of its own, apart from the one-key locks of migration and signing keys.
    static let deviceInsertLockClass: Int32 = 0x6b65_7964

    /// Checks the rule and inserts in one transaction that first takes a transaction-scoped
    /// advisory lock for the user.
    ///
    /// Under READ COMMITTED a check in the same statement as the insert would read a snapshot
    /// taken before a concurrent registration committed, so two could pass a cap of 10 at 9.
    /// With the lock, registrations of one user run their check and insert one after another,
    /// and each check is a statement of its own after the lock, which sees the previous
    /// holder's committed row. Different users do not wait for each other (unless their names'
    /// hashes collide, which only costs a wait).
    public func insertDevice(_ device: DeviceRecord, rule: DeviceInsertRule) throws(StorageError) -> DeviceInsertion {
        try write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> DeviceInsertion in
                try connection.execute(
                    "SELECT pg_advisory_xact_lock(\(Self.deviceInsertLockClass), hashtext($1))", [.text(device.user)])
                if try connection.execute("SELECT 1 FROM devices WHERE kid = $1", [.text(device.kid)]).rowCount > 0 {
                    return .kidTaken
                }
                switch rule {
                case .unconditional:
                    break
                case .userHasNoDevices:
                    let known = try connection.execute(
                        "SELECT 1 FROM devices WHERE user_name = $1 LIMIT 1", [.text(device.user)])
                    if known.rowCount > 0 { return .userHasDevices }
                case .pendingBelow(let limit, let createdAfter):
                    let counted = try connection.execute(
                        """
                        SELECT COUNT(*), MIN(created_at) FROM devices
                        WHERE user_name = $1 AND status = 'pending' AND created_at > $2
                        """,
                        [.text(device.user), .integer(createdAfter)])
                    if let count = counted.integer(0, 0), count >= Int64(limit), let oldest = counted.integer(0, 1) {
                        return .pendingLimitReached(oldestCreatedAt: oldest)
                    }
                }
                let inserted = try connection.execute(
                    """
                    INSERT INTO devices (\(Self.deviceColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                    ON CONFLICT (kid) DO NOTHING
                    """,
                    [
                        .text(device.kid), .text(device.user), .text(device.name), .text(device.publicKeyPEM),
                        .text(device.status.rawValue), .integer(device.createdAt), Self.optional(device.approvedAt),
                        Self.optional(device.revokedAt), Self.optional(device.lastLoginAt),
                        device.registeredFrom.map(PostgresValue.text) ?? .null,
                    ])
                // Another user's registration of the same key, under another user's lock.
                return inserted.affectedRows == 1 ? .inserted : .kidTaken
            }
        }
    }

    public func device(kid: String) throws(StorageError) -> DeviceRecord? {
        try read { connection throws(StorageError) in
            try Self.devices(
                from: connection.execute("SELECT \(Self.deviceColumns) FROM devices WHERE kid = $1", [.text(kid)])
            ).first
        }
    }

    public func devices(
        user: String, after position: DeviceListPosition, limit: Int
    ) throws(StorageError) -> [DeviceRecord] {
        try read { connection throws(StorageError) in
            try Self.devices(
                from: connection.execute(
                    """
                    SELECT \(Self.deviceColumns) FROM devices WHERE user_name = $1 AND (created_at, kid) > ($2, $3)
                    ORDER BY created_at, kid LIMIT $4
                    """,
                    [.text(user), .integer(position.createdAt), .text(position.kid), .integer(Int64(max(limit, 0)))]))
        }
    }

    public func allDevices() throws(StorageError) -> [DeviceRecord] {
        try read { connection throws(StorageError) in
            try Self.devices(
                from: connection.execute(
                    "SELECT \(Self.deviceColumns) FROM devices ORDER BY user_name, created_at, kid"))
        }
    }

    public func deviceStatuses(user: String) throws(StorageError) -> Set<DeviceStatus> {
        try read { connection throws(StorageError) in
            let result = try connection.execute(
                "SELECT DISTINCT status FROM devices WHERE user_name = $1", [.text(user)])
            return Set((0..<result.rowCount).compactMap { row in result.text(row, 0).flatMap(DeviceStatus.init) })
        }
    }

    public func updateStatus(
        kid: String, from expected: DeviceStatus, to status: DeviceStatus, at time: Int64
    ) throws(StorageError) -> Bool {
        // Under READ COMMITTED a concurrent UPDATE of the same row waits, then re-checks the
        // WHERE clause against the committed row: the loser of a race matches nothing.
        try write { connection throws(StorageError) in
            try connection.execute(
                """
                UPDATE devices SET status = $1,
                    approved_at = CASE WHEN $1 = 'active' THEN $4 ELSE approved_at END,
                    revoked_at = CASE WHEN $1 IN ('revoked', 'denied') THEN $4 ELSE revoked_at END
                WHERE kid = $2 AND status = $3
                """,
                [.text(status.rawValue), .text(kid), .text(expected.rawValue), .integer(time)]
            ).affectedRows == 1
        }
    }

    public func recordLogin(kid: String, at time: Int64) throws(StorageError) {
        try write { connection throws(StorageError) in
            try connection.execute(
                "UPDATE devices SET last_login_at = $1 WHERE kid = $2", [.integer(time), .text(kid)])
            return ()
        }
    }

    public func purgeDevices(pendingCreatedBefore: Int64, deniedBefore: Int64) throws(StorageError) -> Int {
        try write { connection throws(StorageError) in
            try connection.execute(
                """
                DELETE FROM devices
                WHERE (status = 'pending' AND created_at < $1)
                    OR (status = 'denied' AND COALESCE(revoked_at, created_at) < $2)
                """,
                [.integer(pendingCreatedBefore), .integer(deniedBefore)]
            ).affectedRows
        }
    }

    // MARK: Replay cache

    public func claimJTI(keyID: String, jti: String, expiresAt: Int64) throws(StorageError) -> Bool {
        try write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                [.text(keyID), .text(jti), .integer(expiresAt)]
            ).affectedRows == 1
        }
    }

    public func purgeExpiredJTIs(now: Int64) throws(StorageError) -> Int {
        try write { connection throws(StorageError) in
            try connection.execute("DELETE FROM used_jtis WHERE expires_at < $1", [.integer(now)]).affectedRows
        }
    }

    // MARK: Enrollment codes

    public func insertEnrollmentCode(hash: [UInt8], user: String, expiresAt: Int64) throws(StorageError) {
        try write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO enrollment_codes (code_hash, user_name, expires_at) VALUES ($1, $2, $3)",
                [.bytes(hash), .text(user), .integer(expiresAt)])
            return ()
        }
    }

    public func consumeEnrollmentCode(hash: [UInt8], user: String, now: Int64) throws(StorageError) -> Bool {
        // One conditional UPDATE: of two instances consuming the same code at once, the second
        // waits for the first and then finds `used_at` set.
        try write { connection throws(StorageError) in
            try connection.execute(
                """
                UPDATE enrollment_codes SET used_at = $3
                WHERE code_hash = $1 AND user_name = $2 AND used_at IS NULL AND expires_at > $3
                RETURNING 1
                """,
                [.bytes(hash), .text(user), .integer(now)]
            ).rowCount == 1
        }
    }

    public func purgeExpiredEnrollmentCodes(now: Int64) throws(StorageError) -> Int {
        try write { connection throws(StorageError) in
            try connection.execute(
                "DELETE FROM enrollment_codes WHERE expires_at < $1 OR used_at IS NOT NULL", [.integer(now)]
            ).affectedRows
        }
    }

    // MARK: Signing keys

    public func signingKeys() throws(StorageError) -> [SigningKeyRecord] {
        try read { connection throws(StorageError) in
            let result = try connection.execute(
                "SELECT kid, encode(private_pem, 'hex'), created_at FROM signing_keys ORDER BY created_at, kid")
            var keys: [SigningKeyRecord] = []
            for row in 0..<result.rowCount {
                guard let kid = result.text(row, 0), let pem = result.hexBytes(row, 1),
                    let createdAt = result.integer(row, 2)
                else {
                    for var key in keys { Crypto.wipe(&key.privatePEM) }
                    throw StorageError(.queryFailed, "a signing key row is incomplete")
                }
                keys.append(SigningKeyRecord(kid: kid, privatePEM: pem, createdAt: createdAt))
            }
            return keys
        }
    }

    public func insertSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        try write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                [.text(kid), .bytes(privatePEM), .integer(createdAt)]
            ).affectedRows == 1
        }
    }

    public func insertFirstSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        // Under READ COMMITTED a NOT EXISTS in the INSERT would see a snapshot taken before a
        // concurrent insert committed; the advisory lock makes the check and the insert one step,
        // and the check runs as its own statement after the lock, so it sees the winner's row.
        try write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) in
                try connection.execute("SELECT pg_advisory_xact_lock($1)", [.integer(Self.signingKeyLockKey)])
                let existing = try connection.execute("SELECT COUNT(*) FROM signing_keys").integer(0, 0) ?? 0
                guard existing == 0 else { return false }
                return try connection.execute(
                    "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    [.text(kid), .bytes(privatePEM), .integer(createdAt)]
                ).affectedRows == 1
            }
        }
    }

    /// The advisory lock that serialises the creation of the first signing key.
    static let signingKeyLockKey: Int64 = 0x6B65_7961_7574_6831  // "keyauth1"

    // MARK: Operations

    public func healthCheck() throws(StorageError) {
        let version = try read { connection throws(StorageError) in
            try connection.execute("SELECT MAX(version) FROM schema_migrations").integer(0, 0)
        }
        guard version == PostgresSchema.latestVersion else {
            throw StorageError(.unavailable, "the database schema is not at version \(PostgresSchema.latestVersion)")
        }
    }

    public func close() {
        pool.close()
    }

    private static func optional(_ value: Int64?) -> PostgresValue {
        value.map(PostgresValue.integer) ?? .null
    }
}
