import Synchronization

/// Counts events (failed logins and registrations, or registration attempts) per client address
/// in a sliding window (PROTOCOL.md section 6, "Rate limiting").
///
/// Only the address is slowed down, never a user or a key, so an attacker cannot lock a user out
/// by failing on their behalf. Addresses are ``RateLimitKey``s: IPv4 addresses and IPv6 /64s.
///
/// Every login and registration passes through here, so nothing in it may grow with the number
/// of tracked addresses or make one request wait for another's: the addresses are spread over
/// ``shardCount`` shards by hash, each behind its own mutex, and each shard keeps its addresses in
/// least-recently-counted order, so that dropping the stalest address when the shard is full,
/// and forgetting expired ones, costs O(1) per address. Memory is bounded: at most `limit`
/// timestamps per address and at most `maximumAddresses` addresses in all (each shard holds an
/// equal part).
package final class AddressRateLimiter: Sendable {
    /// Shards: enough that 32 worker threads rarely meet on one lock.
    package static let shardCount = 16
    /// The default bound on tracked addresses.
    package static let defaultMaximumAddresses = 100_000

    private let limit: Int
    private let window: Int64
    private let now: @Sendable () -> Int64
    private let shards: [LockedShard]

    /// - Parameters:
    ///   - limit: events an address may have in the window before ``retryAfter(for:)`` says wait.
    ///   - window: the window in seconds.
    ///   - maximumAddresses: how many addresses are tracked at most.
    ///   - now: the clock, in seconds.
    package init(
        limit: Int, window: Int64, maximumAddresses: Int = defaultMaximumAddresses,
        now: @escaping @Sendable () -> Int64
    ) {
        self.limit = max(limit, 1)
        self.window = max(window, 1)
        self.now = now
        let perShard = max((max(maximumAddresses, 1) + Self.shardCount - 1) / Self.shardCount, 1)
        shards = (0..<Self.shardCount).map { _ in LockedShard(capacity: perShard) }
    }

    /// Seconds until `key` may try again, or nil when it is under the limit.
    package func retryAfter(for key: RateLimitKey) -> Int? {
        check(key, countingIfUnder: false)
    }

    /// Counts one event of `key` unless it is at the limit, in one step under its shard's lock,
    /// so that concurrent attempts at `limit - 1` cannot all pass between a check and a count.
    /// Returns nil when counted, else the seconds until `key` may try again (nothing counted, so
    /// refusals do not extend the wait).
    package func admit(_ key: RateLimitKey) -> Int? {
        check(key, countingIfUnder: true)
    }

    /// The seconds until `key` may try again, or nil when it is under the limit, in which case
    /// the event is counted too when `counting`.
    private func check(_ key: RateLimitKey, countingIfUnder counting: Bool) -> Int? {
        let current = now()
        let cutoff = current - window
        let limit = limit
        let window = window
        return shard(for: key).state.withLock { shard -> Int? in
            if let oldest = shard.oldestEvent(of: key, keepingAfter: cutoff, ifAtLeast: limit) {
                return Int(max(oldest + window - current, 1))
            }
            if counting { shard.record(key, at: current, keepingAfter: cutoff, limit: limit) }
            return nil
        }
    }

    /// Counts one event of `key`.
    package func record(_ key: RateLimitKey) {
        let current = now()
        let cutoff = current - window
        let limit = limit
        shard(for: key).state.withLock { $0.record(key, at: current, keepingAfter: cutoff, limit: limit) }
    }

    /// Forgets addresses whose events all left the window; called by the periodic cleanup.
    package func purge() {
        let cutoff = now() - window
        for shard in shards {
            shard.state.withLock { $0.forgetStale(upTo: cutoff) }
        }
    }

    /// Addresses tracked now, in all shards.
    package var trackedAddresses: Int {
        shards.reduce(0) { total, shard in total + shard.state.withLock { $0.count } }
    }

    private func shard(for key: RateLimitKey) -> LockedShard {
        var hasher = Hasher()
        hasher.combine(key)
        return shards[Int(UInt(bitPattern: hasher.finalize()) % UInt(Self.shardCount))]
    }
}

/// One shard and its mutex (a `Mutex` cannot live in an array by itself).
private final class LockedShard: Sendable {
    let state: Mutex<RateLimitShard>

    init(capacity: Int) {
        state = Mutex(RateLimitShard(capacity: capacity))
    }
}

/// The addresses of one shard: a dictionary into a slab of entries that form a doubly linked
/// list from the most recently counted to the least, so that moving an entry to the front,
/// dropping the last one and forgetting stale ones from the back are all O(1).
struct RateLimitShard {
    private struct Entry {
        var key: RateLimitKey
        var events: EventWindow
        /// The next more recently counted entry, or -1.
        var newer: Int
        /// The next less recently counted entry, or -1.
        var older: Int
    }

    private let capacity: Int
    private var indexes: [RateLimitKey: Int] = [:]
    private var entries: [Entry] = []
    private var unused: [Int] = []
    private var newest = -1
    private var oldest = -1

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    /// Addresses tracked.
    var count: Int { indexes.count }

    /// The oldest event of `key` after `cutoff` when it has at least `limit` of them, else nil.
    mutating func oldestEvent(of key: RateLimitKey, keepingAfter cutoff: Int64, ifAtLeast limit: Int) -> Int64? {
        guard let index = indexes[key] else { return nil }
        entries[index].events.forget(upTo: cutoff)
        guard entries[index].events.count >= limit else { return nil }
        return entries[index].events.oldest
    }

    /// Counts an event of `key` at `time`, making room by dropping the least recently counted
    /// address when the shard is full.
    mutating func record(_ key: RateLimitKey, at time: Int64, keepingAfter cutoff: Int64, limit: Int) {
        let index: Int
        if let existing = indexes[key] {
            index = existing
            unlink(index)
            entries[index].events.forget(upTo: cutoff)
        } else {
            if indexes.count >= capacity, oldest >= 0 { remove(oldest) }
            let entry = Entry(key: key, events: EventWindow(), newer: -1, older: -1)
            if let free = unused.popLast() {
                index = free
                entries[index] = entry
            } else {
                index = entries.count
                entries.append(entry)
            }
            indexes[key] = index
        }
        entries[index].events.append(time, keepingAtMost: limit)
        linkAsNewest(index)
    }

    /// Forgets addresses whose latest event is at or before `cutoff`, from the back of the list,
    /// where they gather; stops at the first address still counting.
    mutating func forgetStale(upTo cutoff: Int64) {
        while oldest >= 0, (entries[oldest].events.newest ?? Int64.min) <= cutoff {
            remove(oldest)
        }
    }

    private mutating func remove(_ index: Int) {
        unlink(index)
        indexes[entries[index].key] = nil
        // Drop the key and the timestamps now; the slot is reused by the next new address.
        entries[index] = Entry(key: .ipv4(0), events: EventWindow(), newer: -1, older: -1)
        unused.append(index)
    }

    private mutating func unlink(_ index: Int) {
        let (newer, older) = (entries[index].newer, entries[index].older)
        if newer >= 0 { entries[newer].older = older } else { newest = older }
        if older >= 0 { entries[older].newer = newer } else { oldest = newer }
        entries[index].newer = -1
        entries[index].older = -1
    }

    private mutating func linkAsNewest(_ index: Int) {
        entries[index].older = newest
        entries[index].newer = -1
        if newest >= 0 { entries[newest].newer = index }
        newest = index
        if oldest < 0 { oldest = index }
    }
}

/// The event times of one address inside the window, oldest first, in a ring that grows up to
/// the limit: appending, and dropping the oldest, are O(1).
struct EventWindow {
    private var times: [Int64] = []
    /// Where the oldest event is in `times`.
    private var start = 0
    /// Events kept.
    private(set) var count = 0

    /// The oldest event kept.
    var oldest: Int64? { count == 0 ? nil : times[start] }
    /// The latest event kept.
    var newest: Int64? { count == 0 ? nil : times[(start + count - 1) % times.count] }

    /// Drops events at or before `cutoff`.
    mutating func forget(upTo cutoff: Int64) {
        while count > 0, times[start] <= cutoff {
            start = (start + 1) % times.count
            count -= 1
        }
    }

    /// Adds an event at `time`, dropping the oldest when `limit` are kept already: the
    /// retry time only ever needs the latest `limit` events.
    mutating func append(_ time: Int64, keepingAtMost limit: Int) {
        if count >= limit {
            times[start] = time
            start = (start + 1) % times.count
        } else if count == times.count {
            // The ring is full but below the limit: unroll it, oldest first, and grow it.
            if start != 0 {
                times = Array(times[start...] + times[..<start])
                start = 0
            }
            times.append(time)
            count += 1
        } else {
            times[(start + count) % times.count] = time
            count += 1
        }
    }
}
