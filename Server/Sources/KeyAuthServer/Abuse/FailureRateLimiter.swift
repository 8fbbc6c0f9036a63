import Synchronization

/// Counts failed logins and registrations per client address in a sliding window
/// (PROTOCOL.md section 6, "Rate limiting").
///
/// Only the failing address is slowed down, never a user or a key, so an attacker cannot lock a
/// user out by failing on their behalf. Memory is bounded: at most `limit` timestamps per
/// address, and at most `maximumAddresses` addresses (the oldest are dropped first).
final class FailureRateLimiter: Sendable {
    private let limit: Int
    private let window: Int64
    private let maximumAddresses: Int
    private let now: @Sendable () -> Int64
    private let failures = Mutex<[String: [Int64]]>([:])

    init(limit: Int, window: Int64, maximumAddresses: Int = 100_000, now: @escaping @Sendable () -> Int64) {
        self.limit = max(limit, 1)
        self.window = max(window, 1)
        self.maximumAddresses = maximumAddresses
        self.now = now
    }

    /// Seconds until `address` may try again, or nil when it is under the limit.
    func retryAfter(for address: String) -> Int? {
        let current = now()
        return failures.withLock { failures -> Int? in
            guard let times = failures[address] else { return nil }
            let recent = times.filter { $0 > current - window }
            guard recent.count >= limit, let oldest = recent.first else { return nil }
            return Int(max(oldest + window - current, 1))
        }
    }

    /// Counts one failure of `address`.
    func recordFailure(for address: String) {
        let current = now()
        failures.withLock { failures in
            var times = (failures[address] ?? []).filter { $0 > current - window }
            times.append(current)
            if times.count > limit { times.removeFirst(times.count - limit) }
            failures[address] = times
            if failures.count > maximumAddresses {
                Self.purge(&failures, before: current - window)
                while failures.count > maximumAddresses,
                    let victim = failures.min(by: { ($0.value.last ?? 0) < ($1.value.last ?? 0) })
                {
                    failures[victim.key] = nil
                }
            }
        }
    }

    /// Forgets addresses whose failures all left the window; called by the periodic cleanup.
    func purge() {
        let current = now()
        failures.withLock { Self.purge(&$0, before: current - window) }
    }

    private static func purge(_ failures: inout [String: [Int64]], before cutoff: Int64) {
        failures = failures.filter { ($0.value.last ?? 0) > cutoff }
    }
}
