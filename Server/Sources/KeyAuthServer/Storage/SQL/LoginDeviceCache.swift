import Synchronization

/// Device records kept in memory for logins, each trusted only while no keyauth process on
/// the database has changed any device since it was read, and for at most ``maximumAge``.
///
/// Reading a device costs a login a read transaction (two `fcntl` locks) and the row's decoding:
/// about a fifth of its CPU outside cryptography. ``SQLiteDeviceChanges`` counts every
/// transaction that changes a device, in this process or another (`keyauth-server revoke`),
/// before it commits. A record is kept only when no such transaction was under way before the
/// read began, and is used while the count of started changes is still the one it was read at.
/// So a change that committed before a login begins is always seen by that login: revocation
/// still applies to the next login.
///
/// Changes made by other programs (the `sqlite3` shell) do not count themselves; they reach
/// logins within ``maximumAge``. Unknown `kid`s are never kept, so that a flood of made-up keys
/// cannot fill the cache; at ``capacity`` an arbitrary entry makes room.
final class LoginDeviceCache: Sendable {
    /// A class, so that taking one out of the shared table for a login is one retain.
    private final class Entry: Sendable {
        let record: DeviceRecord
        /// ``SQLiteDeviceChanges/started`` when the read began.
        let generation: UInt64
        /// Monotonic nanoseconds when the read began.
        let readAt: UInt64

        init(record: DeviceRecord, generation: UInt64, readAt: UInt64) {
            self.record = record
            self.generation = generation
            self.readAt = readAt
        }
    }

    /// How long a kept record may be used, for changes that nothing counts.
    static let defaultMaximumAge: UInt64 = 1_000_000_000

    let capacity: Int
    let maximumAge: UInt64
    private let changes: SQLiteDeviceChanges
    private let clock: @Sendable () -> UInt64
    private let entries = Mutex<[String: Entry]>([:])

    init(
        changes: SQLiteDeviceChanges, capacity: Int = 4096, maximumAge: UInt64 = defaultMaximumAge,
        clock: @escaping @Sendable () -> UInt64 = { ServerClock.monotonicNanoseconds() }
    ) {
        self.changes = changes
        self.capacity = max(capacity, 1)
        self.maximumAge = maximumAge
        self.clock = clock
    }

    /// The device `kid`, kept or read with `read` (and then kept when that is safe).
    ///
    /// The counters are read in this order: `started` before `finished`, both before the read.
    /// Equal, they mean that every change counted so far had ended, its commit visible to the
    /// read that follows; a change that starts later raises `started` and retires the entry.
    func device(
        kid: String, read: () throws(StorageError) -> DeviceRecord?
    ) throws(StorageError) -> DeviceRecord? {
        let generation = changes.started
        let now = clock()
        if let entry = entries.withLock({ $0[kid] }), entry.generation == generation, now &- entry.readAt < maximumAge {
            return entry.record
        }
        let settled = changes.finished == generation
        guard let record = try read() else { return nil }
        if settled {
            let entry = Entry(record: record, generation: generation, readAt: now)
            entries.withLock { entries in
                if entries[kid] == nil, entries.count >= capacity {
                    entries.remove(at: entries.startIndex)
                }
                entries[kid] = entry
            }
        }
        return record
    }

    /// How many records are kept, some perhaps retired already.
    var count: Int {
        entries.withLock { $0.count }
    }
}
