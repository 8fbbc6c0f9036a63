import KeyAuth

/// Which of the server's signing keys signs, which are published and which may be retired, as a
/// pure function of the `signing_keys` rows and the clock (PROTOCOL.md section 3, "Key
/// rotation").
///
/// Every instance on one database reads the same rows, so every instance comes to the same
/// answer at the same moment without any coordination: a rotation is one inserted row whose
/// `active_from` lies in the future, and the switch happens when the clocks pass it.
struct SigningKeySchedule: Sendable {
    /// One key's dates.
    struct Entry: Sendable, Equatable {
        var kid: String
        var algorithm: JWSAlgorithm
        var createdAt: Int64
        var activeFrom: Int64
        var retiredAt: Int64?
    }

    /// Where a key is in its life at a given moment.
    enum State: Sendable, Equatable {
        /// Published, and signs from `activeFrom` on.
        case next(activeFrom: Int64)
        /// Signs the tokens issued now.
        case current
        /// Published so that the tokens it signed until `signedUntil` (access tokens, and for
        /// an RS256 key ID tokens) keep verifying; retired once they have all expired.
        case previous(signedUntil: Int64)
        /// Gone from the JWK set, its private key wiped.
        case retired(at: Int64)
    }

    /// Every key, in the order they take over signing: `active_from`, then `created_at`, then
    /// `kid`, so that two instances never order two keys differently.
    let entries: [Entry]

    init(_ entries: [Entry]) {
        self.entries = entries.sorted { lhs, rhs in
            (lhs.activeFrom, lhs.createdAt, lhs.kid) < (rhs.activeFrom, rhs.createdAt, rhs.kid)
        }
    }

    /// The key that signs at `now`: the last published key whose `active_from` has passed; the
    /// earliest published key when none has (a clock set back), so that the server still signs
    /// with a published key. Nil only without any published key.
    func currentKeyID(at now: Int64) -> String? {
        // Every login asks: a lazy view of the published keys, not a new array per call.
        let published = entries.lazy.filter { $0.retiredAt == nil }
        return (published.last { $0.activeFrom <= now } ?? published.first)?.kid
    }

    /// The key of `algorithm` that signs at `now`, by the same rule among that algorithm's keys:
    /// ID tokens are RS256 whatever `--token-alg` is (OpenID Connect Core section 3.1.3.7).
    func currentKeyID(at now: Int64, algorithm: JWSAlgorithm) -> String? {
        SigningKeySchedule(entries.filter { $0.algorithm == algorithm }).currentKeyID(at: now)
    }

    /// The state of every key at `now`, by `kid`.
    func states(at now: Int64) -> [String: State] {
        let current = currentKeyID(at: now)
        var states: [String: State] = [:]
        for (index, entry) in entries.enumerated() {
            if let retiredAt = entry.retiredAt {
                states[entry.kid] = .retired(at: retiredAt)
            } else if entry.kid == current {
                states[entry.kid] = .current
            } else if entry.activeFrom > now {
                states[entry.kid] = .next(activeFrom: entry.activeFrom)
            } else {
                // A key before the current one stopped signing access tokens when the key after
                // it took over; an RS256 key also signed ID tokens until the next RS256 key took
                // over, which can be much later (RS256, then ES256, then RS256 again).
                let later = entries[(index + 1)...]
                var signedUntil = later.first { $0.activeFrom <= now }?.activeFrom ?? now
                if entry.algorithm == .rs256 {
                    let idTokenSuccessor = later.first { $0.algorithm == .rs256 && $0.activeFrom <= now }
                    signedUntil = max(signedUntil, idTokenSuccessor?.activeFrom ?? now)
                }
                states[entry.kid] = .previous(signedUntil: signedUntil)
            }
        }
        return states
    }

    /// The keys that may be retired at `now`: previous keys whose last token has expired, with
    /// the verifier's leeway (`signedUntil + tokenLifetime + leeway` has passed).
    /// The RS256 key that signs ID tokens (``currentKeyID(at:algorithm:)``) is never retirable.
    func retirable(at now: Int64, tokenLifetime: Int64, leeway: Int64) -> [String] {
        let idTokenKey = currentKeyID(at: now, algorithm: .rs256)
        return states(at: now).compactMap { kid, state in
            guard kid != idTokenKey, case .previous(let signedUntil) = state, now > signedUntil + tokenLifetime + leeway
            else {
                return nil
            }
            return kid
        }.sorted()
    }

    /// When a previous key will be retired, for `keys list`.
    static func retirement(signedUntil: Int64, tokenLifetime: Int64, leeway: Int64) -> Int64 {
        signedUntil + tokenLifetime + leeway + 1
    }
}
