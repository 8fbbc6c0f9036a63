import Dispatch
import KeyAuth
import Synchronization

/// A few PostgreSQL connections shared by the server's request threads.
///
/// A request thread checks a connection out for one storage call and blocks while all are
/// busy, up to a timeout after which it gets `.unavailable` (503) rather than queueing forever.
/// Connections are opened on first use and repaired on checkout, so the pool heals by itself
/// once the database is back: nobody has to restart the server after a database failover.
///
/// A statement that fails because its connection broke is retried once on a repaired
/// connection only when the caller says that is safe (reads, and transactions that are
/// idempotent as a whole). A write is not retried: the server may have committed it before the
/// connection broke, and running it again could, for example, consume an enrollment code twice
/// over or report a fresh `jti` as a replay. Its caller gets `.unavailable` and the client retries.
final class PostgresConnectionPool: Sendable {
    private let slots: [PostgresConnectionSlot]
    /// Indices of idle slots, first in first out, so that every connection is used in turn and
    /// a dead one is found on checkout rather than by a write after long idleness.
    private let idleSlots: Mutex<[Int]>
    /// Counts idle slots; a checkout waits on it.
    private let idleCount: DispatchSemaphore
    private let isClosed = Atomic<Bool>(false)
    private let checkoutTimeoutSeconds: Int
    let location: PostgresLocation

    /// The connections the pool keeps.
    var size: Int { slots.count }

    /// Creates `size` slots; nothing connects until the first checkout.
    init(location: PostgresLocation, size: Int, checkoutTimeoutSeconds: Int) {
        let size = max(size, 1)
        self.location = location
        self.checkoutTimeoutSeconds = checkoutTimeoutSeconds
        slots = (0..<size).map { _ in PostgresConnectionSlot(location: location) }
        idleSlots = Mutex(Array(0..<size))
        idleCount = DispatchSemaphore(value: size)
    }

    /// Runs `body` on a checked-out, open connection.
    ///
    /// - Parameters:
    ///   - retryingIfBroken: whether `body` may run a second time, on a repaired connection,
    ///     when its connection broke under it. Only for work that is safe to repeat.
    ///   - body: the storage work; it must leave the connection outside any transaction.
    /// - Throws: `.closed` after ``close()``; `.unavailable` when no connection becomes free in
    ///   time, the database cannot be reached, or a write's connection broke; whatever `body`
    ///   throws otherwise.
    func withConnection<Result: Sendable>(
        retryingIfBroken: Bool, _ body: (PostgresConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        guard !isClosed.load(ordering: .acquiring) else { throw StorageError(.closed, "the storage is closed") }
        guard idleCount.wait(timeout: .now() + .seconds(checkoutTimeoutSeconds)) == .success else {
            throw StorageError(
                .unavailable,
                "all \(slots.count) PostgreSQL connections stayed busy for \(checkoutTimeoutSeconds) s")
        }
        defer { idleCount.signal() }
        guard let index = idleSlots.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else {
            throw StorageError(.unavailable, "the PostgreSQL connection pool lost track of its connections")
        }
        defer { idleSlots.withLock { $0.append(index) } }
        return try slots[index].use(retryingIfBroken: retryingIfBroken, body)
    }

    /// Closes every connection once its current user is done; later checkouts throw `.closed`.
    func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for slot in slots { slot.close() }
    }
}

/// One pooled connection behind its lock, opened lazily and repaired in place.
final class PostgresConnectionSlot: Sendable {
    private struct State {
        var connection: PostgresConnection?
        var isClosed = false
    }

    private let state = Mutex(State())
    private let location: PostgresLocation

    init(location: PostgresLocation) {
        self.location = location
    }

    /// Runs `body` on this slot's connection, connecting or repairing it first.
    func use<Result: Sendable>(
        retryingIfBroken: Bool, _ body: (PostgresConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try state.withLock { (state: inout State) throws(StorageError) -> Result in
            guard !state.isClosed else { throw StorageError(.closed, "the storage is closed") }
            let connection: PostgresConnection
            if let existing = state.connection {
                connection = existing
                // Dead on checkout (the server restarted, or an earlier attempt failed): reconnect.
                if !connection.checkOpen(), !connection.reset() {
                    throw StorageError(
                        .unavailable, "cannot connect to PostgreSQL at \(location)", underlying: connection.nativeError)
                }
            } else {
                connection = try PostgresConnection(location)
                state.connection = connection
                guard connection.isOpen else {
                    throw StorageError(
                        .unavailable, "cannot connect to PostgreSQL at \(location)", underlying: connection.nativeError)
                }
            }
            defer {
                // Never hand the next caller a connection stuck inside a transaction (a failed
                // ROLLBACK): resetting it makes the server roll back. Nor one to a server that
                // refused a write as read-only: reconnecting finds the primary.
                if connection.isOpen, !connection.isIdle || connection.foundServerReadOnly { connection.reset() }
            }
            do throws(StorageError) {
                return try body(connection)
            } catch {
                guard !connection.isOpen else { throw error }
                guard retryingIfBroken else {
                    throw StorageError(
                        .unavailable, "the connection to PostgreSQL broke during a write, whose outcome is unknown",
                        underlying: error.underlying)
                }
                guard connection.reset() else {
                    throw StorageError(
                        .unavailable, "cannot reconnect to PostgreSQL at \(location)",
                        underlying: connection.nativeError)
                }
                return try body(connection)
            }
        }
    }

    /// Closes the connection (its `deinit` calls `PQfinish`) once no caller holds it.
    func close() {
        state.withLock { state in
            state.isClosed = true
            state.connection = nil
        }
    }
}

/// The pool as the storage's database: reads and the migration may run again on a repaired
/// connection; writes never do, since the server may have committed one before the connection
/// broke.
extension PostgresConnectionPool: SQLDatabase {
    var dialect: SQLDialect { .postgres }

    /// None: instances on other machines change devices, so every login reads its device.
    var deviceChanges: SQLiteDeviceChanges? { nil }

    /// libpq's calls block, and PostgreSQL's commit is durable when it returns.
    var writesBlockUntilDurable: Bool { true }

    func read<Result: Sendable>(
        _ body: (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try withConnection(retryingIfBroken: true) { connection throws(StorageError) in try body(connection) }
    }

    func write<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Result
    ) throws(StorageError) -> Result {
        try withConnection(retryingIfBroken: false) { connection throws(StorageError) in try body(connection) }
    }

    /// Migrating is one transaction that checks the version first, so it is safe to repeat.
    func migrate(_ body: @escaping @Sendable (any SQLConnection) throws(StorageError) -> Void) throws(StorageError) {
        try withConnection(retryingIfBroken: true) { connection throws(StorageError) in try body(connection) }
    }

    /// Written at once: every instance must see a login another one recorded, and a shared
    /// database has no batch to add it to.
    func writeEventually(_ write: SQLDeferredWrite) throws(StorageError) {
        try self.write { connection throws(StorageError) in
            try connection.execute(write.sql, write.bindings)
            return ()
        }
    }

    func noteKeptRead() {}

    func pendingValue(of sql: String, key: String) -> SQLValue? { nil }

    func pendingValues(of sql: String) -> [String: SQLValue] { [:] }
}
