import Synchronization

/// A ``DPoPReplayCache`` in the process's memory: enough for one service instance, since a
/// proof's `jti` only needs keeping for the proof's window (60 s).
///
/// Several instances behind one load balancer each see only their own requests, so a proof
/// replayed to another instance would pass: those deployments need a shared cache (the keyauth
/// server keeps its own in its database). The cache holds at most ``capacity`` entries, and at
/// most ``capacityPerKey`` of one device key; when either is full of unexpired ones it refuses
/// new proofs rather than forget one that could be replayed. The second limit keeps one holder
/// of a bound token, signing proofs as fast as it can, from filling the cache and so refusing
/// every other user's requests.
public final class InMemoryDPoPReplayCache: DPoPReplayCache {
    /// The most entries held.
    public let capacity: Int
    /// The most entries held for one key (`cnf.jkt`).
    public let capacityPerKey: Int
    private let clock: KeyAuthClock
    private let state = Mutex(State())

    /// The proofs remembered, and how many of them each key made.
    private struct State {
        var expiries: [String: Int64] = [:]
        var countsByKey: [String: Int] = [:]
        /// The second of the last purge: entries expire in whole seconds, so a second purge
        /// within the same second would find nothing, and a full cache costs one pass a second
        /// at most, not one per proof.
        var purgedAt = Int64.min

        mutating func purge(at now: Int64) {
            expiries = expiries.filter { $0.value >= now }
            countsByKey = [:]
            for key in expiries.keys {
                let thumbprint = key.prefix { $0 != " " }
                countsByKey[String(thumbprint), default: 0] += 1
            }
            purgedAt = now
        }
    }

    private enum Outcome {
        case claimed, replayed, full, fullForKey
    }

    /// - Parameters:
    ///   - capacity: the most unexpired proofs remembered at once.
    ///   - capacityPerKey: the most unexpired proofs of one key remembered at once; a tenth of
    ///     `capacity` by default (10,000 in 60 s is about 170 requests a second from one device).
    ///   - clock: the time source that expires entries.
    public init(capacity: Int = 100_000, capacityPerKey: Int? = nil, clock: KeyAuthClock = .system) {
        self.capacity = max(capacity, 1)
        self.capacityPerKey = min(max(capacityPerKey ?? capacity / 10, 1), self.capacity)
        self.clock = clock
    }

    public func claim(jwtID: String, keyThumbprint: String, expiresAt: Int64) throws(KeyAuthError) -> Bool {
        // A thumbprint is base64url, so the first space ends it.
        let key = keyThumbprint + " " + jwtID
        let now = clock.seconds
        let outcome: Outcome = state.withLock { state in
            if let existing = state.expiries[key], existing >= now { return .replayed }
            let isFull = { (state: State) in
                state.expiries.count >= self.capacity
                    || state.countsByKey[keyThumbprint, default: 0] >= self.capacityPerKey
            }
            if isFull(state), state.purgedAt < now { state.purge(at: now) }
            guard state.expiries.count < capacity else { return .full }
            guard state.countsByKey[keyThumbprint, default: 0] < capacityPerKey else { return .fullForKey }
            if state.expiries.updateValue(expiresAt, forKey: key) == nil {
                state.countsByKey[keyThumbprint, default: 0] += 1
            }
            return .claimed
        }
        switch outcome {
        case .claimed: return true
        case .replayed: return false
        case .full:
            throw KeyAuthError(.dpopProofInvalid, "too many DPoP proofs at once: the replay cache is full")
        case .fullForKey:
            throw KeyAuthError(.dpopProofInvalid, "too many DPoP proofs of this key at once: wait a minute")
        }
    }

    /// How many proofs are remembered.
    public var count: Int { state.withLock { $0.expiries.count } }
}
