import Glibc
import KeyAuth
import Synchronization

/// ``ServerStorage`` in one SQLite file: WAL mode, `synchronous=FULL`, one writer connection
/// behind a group committer and a few reader connections, each behind its own `Mutex`.
///
/// WAL lets readers run while the writer commits, so logins (which mostly read) do not queue
/// behind registrations. SQLite allows one writer at a time anyway, so one write connection
/// loses nothing. `synchronous=FULL` fsyncs the WAL on every commit: an answer the server sent
/// (a consumed `jti`, a revocation) is on disk, even after `kill -9` or power loss. Concurrent
/// writes share one commit and one fsync (``SQLiteGroupCommitter``), each still answered only
/// once it is durable.
///
/// `last_login_at` is informational and written lazily: ``recordLogin(kid:at:)`` returns at
/// once and the time reaches the file with the next batch of writes or within a second. Reads
/// through this instance see it immediately; after a crash it may lag by up to a second.
///
/// The server's private signing key lives in this file (table `signing_keys`). That is
/// acceptable for a single-host deployment where the file is as protected as a key file would
/// be (mode 0600, owned by the service user); a PostgreSQL deployment may prefer a KMS.
public final class SQLiteStorage: ServerStorage {
    /// Runs every write; internal so that tests can watch batches form.
    let committer: SQLiteGroupCommitter
    private let readers: [SQLiteConnectionBox]
    private let nextReader = Atomic<Int>(0)
    private let isClosed = Atomic<Bool>(false)

    /// The database file.
    public let path: String

    /// Opens or creates the database at `path`, switches it to WAL and applies migrations.
    ///
    /// - Parameters:
    ///   - path: the database file (created if missing).
    ///   - readerCount: connections for reads, besides the one writer.
    ///   - busyTimeoutMilliseconds: how long a statement waits for another process's lock.
    /// - Throws: ``StorageError`` when the file cannot be opened or migrated.
    public init(
        path: String, readerCount: Int = 2, busyTimeoutMilliseconds: Int32 = 5000,
        now: @Sendable () -> Int64 = { ServerClock.now() }
    ) throws(StorageError) {
        self.path = path
        let writerConnection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        // Several processes may open a new file at once. Switching to WAL needs an exclusive
        // lock, and SQLite answers "busy" at once instead of waiting when waiting could
        // deadlock, so both steps are retried until the busy timeout.
        let deadline = ServerClock.monotonicNanoseconds() + UInt64(max(busyTimeoutMilliseconds, 0)) * 1_000_000
        let mode = try Self.retryingWhileBusy(until: deadline) { () throws(StorageError) in
            try writerConnection.query("PRAGMA journal_mode = WAL") { row in row.text(0) ?? "" }.first
        }
        guard mode?.lowercased() == "wal" else {
            throw StorageError(.unavailable, "cannot switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        let migrationTime = now()
        try Self.retryingWhileBusy(until: deadline) { () throws(StorageError) in
            try SQLiteSchema.migrate(writerConnection, now: migrationTime)
        }
        committer = SQLiteGroupCommitter(writerConnection)
        var readers: [SQLiteConnectionBox] = []
        for _ in 0..<max(readerCount, 1) {
            let connection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
            try connection.execute("PRAGMA query_only = ON")
            readers.append(SQLiteConnectionBox(connection))
        }
        self.readers = readers
    }

    /// Runs `body` again (after a short pause) while it fails with `SQLITE_BUSY`, until the
    /// monotonic `deadline`.
    private static func retryingWhileBusy<Result>(
        until deadline: UInt64, _ body: () throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        while true {
            do {
                return try body()
            } catch {
                guard ((error.underlying?.code ?? 0) & 0xFF) == 5, ServerClock.monotonicNanoseconds() < deadline else {
                    throw error
                }
                usleep(20_000)
            }
        }
    }

    // MARK: Connection access

    private func write<Result: Sendable>(
        _ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        return try committer.write(body)
    }

    private func read<Result: Sendable>(
        _ body: (SQLiteConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        let index = nextReader.wrappingAdd(1, ordering: .relaxed).oldValue
        return try readers[(index & Int.max) % readers.count].with(body)
    }

    // MARK: Devices

    private static let deviceColumns =
        "kid, user, name, public_key_pem, status, created_at, approved_at, revoked_at, last_login_at, registered_from"

    private static func device(from row: SQLiteStatement) throws(StorageError) -> DeviceRecord {
        guard let kid = row.text(0), let user = row.text(1), let name = row.text(2), let pem = row.text(3),
            let status = row.text(4).flatMap(DeviceStatus.init(rawValue:)), let createdAt = row.integer(5)
        else { throw StorageError(.queryFailed, "a device row is incomplete") }
        return DeviceRecord(
            kid: kid, user: user, name: name, publicKeyPEM: pem, status: status, createdAt: createdAt,
            approvedAt: row.integer(6), revokedAt: row.integer(7), lastLoginAt: row.integer(8),
            registeredFrom: row.text(9))
    }

    /// Checks the rule, then inserts, inside the one write transaction of the single writer
    /// connection: `BEGIN IMMEDIATE` holds the database's write lock from before the first
    /// check until the commit, so no other write (of this process or another) comes between.
    public func insertDevice(_ device: DeviceRecord, rule: DeviceInsertRule) throws(StorageError) -> DeviceInsertion {
        try write { connection throws(StorageError) in
            let kidTaken = try !connection.query("SELECT 1 FROM devices WHERE kid = ?", [.text(device.kid)]) { _ in
                true
            }.isEmpty
            if kidTaken { return .kidTaken }
            switch rule {
            case .unconditional:
                break
            case .userHasNoDevices:
                let known = try !connection.query(
                    "SELECT 1 FROM devices WHERE user = ? LIMIT 1", [.text(device.user)]
                ) { _ in true }.isEmpty
                if known { return .userHasDevices }
            case .pendingBelow(let limit, let createdAfter):
                let counted = try connection.query(
                    "SELECT COUNT(*), MIN(created_at) FROM devices WHERE user = ? AND status = 'pending' AND created_at > ?",
                    [.text(device.user), .integer(createdAfter)]
                ) { row in (count: row.integer(0) ?? 0, oldest: row.integer(1)) }.first
                if let counted, counted.count >= Int64(limit), let oldest = counted.oldest {
                    return .pendingLimitReached(oldestCreatedAt: oldest)
                }
            }
            try connection.run(
                "INSERT INTO devices (\(Self.deviceColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(device.kid), .text(device.user), .text(device.name), .text(device.publicKeyPEM),
                    .text(device.status.rawValue), .integer(device.createdAt), Self.optional(device.approvedAt),
                    Self.optional(device.revokedAt), Self.optional(device.lastLoginAt),
                    device.registeredFrom.map(SQLiteValue.text) ?? .null,
                ])
            return .inserted
        }
    }

    public func device(kid: String) throws(StorageError) -> DeviceRecord? {
        let stored = try read { connection throws(StorageError) in
            try connection.query("SELECT \(Self.deviceColumns) FROM devices WHERE kid = ?", [.text(kid)]) {
                row throws(StorageError) in try Self.device(from: row)
            }.first
        }
        guard var device = stored else { return nil }
        if let login = committer.pendingLogin(kid: kid) { device.lastLoginAt = login }
        return device
    }

    public func devices(
        user: String, after position: DeviceListPosition, limit: Int
    ) throws(StorageError) -> [DeviceRecord] {
        withPendingLogins(
            try read { connection throws(StorageError) in
                try connection.query(
                    """
                    SELECT \(Self.deviceColumns) FROM devices WHERE user = ? AND (created_at, kid) > (?, ?)
                    ORDER BY created_at, kid LIMIT ?
                    """,
                    [.text(user), .integer(position.createdAt), .text(position.kid), .integer(Int64(max(limit, 0)))]
                ) { row throws(StorageError) in try Self.device(from: row) }
            })
    }

    public func allDevices() throws(StorageError) -> [DeviceRecord] {
        withPendingLogins(
            try read { connection throws(StorageError) in
                try connection.query("SELECT \(Self.deviceColumns) FROM devices ORDER BY user, created_at, kid") {
                    row throws(StorageError) in try Self.device(from: row)
                }
            })
    }

    /// `devices` with the login times recorded but not yet written.
    private func withPendingLogins(_ devices: [DeviceRecord]) -> [DeviceRecord] {
        let logins = committer.pendingLogins()
        guard !logins.isEmpty else { return devices }
        return devices.map { device in
            var device = device
            if let login = logins[device.kid] { device.lastLoginAt = login }
            return device
        }
    }

    public func deviceStatuses(user: String) throws(StorageError) -> Set<DeviceStatus> {
        try read { connection throws(StorageError) in
            Set(
                try connection.query("SELECT DISTINCT status FROM devices WHERE user = ?", [.text(user)]) { row in
                    row.text(0).flatMap(DeviceStatus.init(rawValue:))
                }.compactMap { $0 })
        }
    }

    public func updateStatus(
        kid: String, from expected: DeviceStatus, to status: DeviceStatus, at time: Int64
    ) throws(StorageError) -> Bool {
        try write { connection throws(StorageError) in
            try connection.run(
                """
                UPDATE devices SET status = ?1,
                    approved_at = CASE WHEN ?1 = 'active' THEN ?4 ELSE approved_at END,
                    revoked_at = CASE WHEN ?1 IN ('revoked', 'denied') THEN ?4 ELSE revoked_at END
                WHERE kid = ?2 AND status = ?3
                """,
                [.text(status.rawValue), .text(kid), .text(expected.rawValue), .integer(time)]) == 1
        }
    }

    /// Notes the login in memory; it is written with the next batch of writes or within a
    /// second (see ``SQLiteGroupCommitter``), and may lag by that much after a crash.
    public func recordLogin(kid: String, at time: Int64) throws(StorageError) {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        try committer.recordLogin(kid: kid, at: time)
    }

    public func purgeDevices(pendingCreatedBefore: Int64, deniedBefore: Int64) throws(StorageError) -> Int {
        try write { connection throws(StorageError) in
            try connection.run(
                """
                DELETE FROM devices
                WHERE (status = 'pending' AND created_at < ?1)
                    OR (status = 'denied' AND COALESCE(revoked_at, created_at) < ?2)
                """,
                [.integer(pendingCreatedBefore), .integer(deniedBefore)])
        }
    }

    // MARK: Replay cache

    public func claimJTI(keyID: String, jti: String, expiresAt: Int64) throws(StorageError) -> Bool {
        try write { connection throws(StorageError) in
            try connection.run(
                "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [.text(keyID), .text(jti), .integer(expiresAt)]) == 1
        }
    }

    /// Rows deleted per write by ``purgeExpiredJTIs(now:)``.
    static let purgeChunkSize = 1000

    /// Deletes in chunks of ``purgeChunkSize``, each its own write: under load the cache gains
    /// thousands of entries a second, and deleting a minute's worth in one statement would hold
    /// up the batch of logins committed with it for as long.
    public func purgeExpiredJTIs(now: Int64) throws(StorageError) -> Int {
        var total = 0
        while true {
            let deleted = try write { connection throws(StorageError) in
                try connection.run(
                    """
                    DELETE FROM used_jtis WHERE (key_id, jti) IN
                        (SELECT key_id, jti FROM used_jtis WHERE expires_at < ? LIMIT ?)
                    """,
                    [.integer(now), .integer(Int64(Self.purgeChunkSize))])
            }
            total += deleted
            if deleted < Self.purgeChunkSize { return total }
        }
    }

    // MARK: Enrollment codes

    public func insertEnrollmentCode(hash: [UInt8], user: String, expiresAt: Int64) throws(StorageError) {
        try write { connection throws(StorageError) in
            try connection.run(
                "INSERT INTO enrollment_codes (code_hash, user, expires_at) VALUES (?, ?, ?)",
                [.blob(hash), .text(user), .integer(expiresAt)])
            return ()
        }
    }

    public func consumeEnrollmentCode(hash: [UInt8], user: String, now: Int64) throws(StorageError) -> Bool {
        try write { connection throws(StorageError) in
            try connection.run(
                """
                UPDATE enrollment_codes SET used_at = ?3
                WHERE code_hash = ?1 AND user = ?2 AND used_at IS NULL AND expires_at > ?3
                """,
                [.blob(hash), .text(user), .integer(now)]) == 1
        }
    }

    public func purgeExpiredEnrollmentCodes(now: Int64) throws(StorageError) -> Int {
        try write { connection throws(StorageError) in
            try connection.run(
                "DELETE FROM enrollment_codes WHERE expires_at < ? OR used_at IS NOT NULL", [.integer(now)])
        }
    }

    // MARK: Signing keys

    public func signingKeys() throws(StorageError) -> [SigningKeyRecord] {
        try read { connection throws(StorageError) in
            try connection.query("SELECT kid, private_pem, created_at FROM signing_keys ORDER BY created_at, kid") {
                row throws(StorageError) in
                guard let kid = row.text(0), let createdAt = row.integer(2) else {
                    throw StorageError(.queryFailed, "a signing key row is incomplete")
                }
                return SigningKeyRecord(kid: kid, privatePEM: row.blob(1), createdAt: createdAt)
            }
        }
    }

    public func insertSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        try write { connection throws(StorageError) in
            try connection.run(
                "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [.text(kid), .blob(privatePEM), .integer(createdAt)]) == 1
        }
    }

    public func insertFirstSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        // One statement on the single writer: SQLite takes the write lock before the NOT EXISTS
        // check, so two processes on one file cannot both insert.
        try write { connection throws(StorageError) in
            try connection.run(
                "INSERT INTO signing_keys (kid, private_pem, created_at) SELECT ?, ?, ? "
                    + "WHERE NOT EXISTS (SELECT 1 FROM signing_keys)",
                [.text(kid), .blob(privatePEM), .integer(createdAt)]) == 1
        }
    }

    // MARK: Operations

    public func healthCheck() throws(StorageError) {
        let version = try read { connection throws(StorageError) in
            try connection.query("SELECT MAX(version) FROM schema_migrations") { row in row.integer(0) }.first
        }
        guard version == SQLiteSchema.latestVersion else {
            throw StorageError(.unavailable, "the database schema is not at version \(SQLiteSchema.latestVersion)")
        }
    }

    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        committer.close()
        for reader in readers { reader.close() }
    }

    private static func optional(_ value: Int64?) -> SQLiteValue {
        value.map(SQLiteValue.integer) ?? .null
    }
}

/// One connection behind a mutex; closing drops the connection (its `deinit` closes the handle)
/// once no caller holds it.
final class SQLiteConnectionBox: Sendable {
    private let connection: Mutex<SQLiteConnection?>

    init(_ connection: consuming sending SQLiteConnection) {
        self.connection = Mutex(connection)
    }

    func with<Result: Sendable>(
        _ body: (SQLiteConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try connection.withLock { (connection: inout SQLiteConnection?) throws(StorageError) -> Result in
            guard let connection else { throw StorageError(.closed, "the storage is closed") }
            return try body(connection)
        }
    }

    func close() {
        connection.withLock { $0 = nil }
    }
}
