import Synchronization

/// A ``DPoPReplayCache`` in the process's memory: enough for one service instance, since a
/// proof's `jti` only needs keeping for the proof's window (60 s).
///
/// Several instances behind one load balancer each see only their own requests, so a proof
/// replayed to another instance would pass: those deployments need a shared cache (the keyauth
/// server keeps its own in its database). The cache holds at most ``capacity`` entries; when it
/// is full of unexpired ones it refuses new proofs rather than forget one that could be replayed.
public final class InMemoryDPoPReplayCache: DPoPReplayCache {
    /// The most entries held.
    public let capacity: Int
    private let clock: KeyAuthClock
    private let entries = Mutex<[String: Int64]>([:])

    /// - Parameters:
    ///   - capacity: the most unexpired proofs remembered at once.
    ///   - clock: the time source that expires entries.
    public init(capacity: Int = 100_000, clock: KeyAuthClock = .system) {
        self.capacity = max(capacity, 1)
        self.clock = clock
    }

    public func claim(jwtID: String, keyThumbprint: String, expiresAt: Int64) throws(KeyAuthError) -> Bool {
        let key = keyThumbprint + " " + jwtID
        let now = clock.seconds
        let outcome: Bool? = entries.withLock { entries in
            if let existing = entries[key], existing >= now { return false }
            if entries.count >= capacity { entries = entries.filter { $0.value >= now } }
            guard entries.count < capacity else { return nil }
            entries[key] = expiresAt
            return true
        }
        guard let outcome else {
            throw KeyAuthError(.dpopProofInvalid, "too many DPoP proofs at once: the replay cache is full")
        }
        return outcome
    }

    /// How many proofs are remembered.
    public var count: Int { entries.withLock { $0.count } }
}
