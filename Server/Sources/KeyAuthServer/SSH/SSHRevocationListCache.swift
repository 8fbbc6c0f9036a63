import KeyAuth
import Synchronization

/// The revocation list `GET /v1/ssh/krl` serves, built from the device and certificate records
/// at most once every ``maximumAge`` seconds instead of at every request.
///
/// Anyone may fetch the list, and building it reads every device, so an uncached endpoint is a
/// way to make the database work for free. A revocation made by this process (the device API,
/// the account page) is seen at once through a ``RevocationSignal``: the next fetch rebuilds.
/// One made elsewhere (another instance on the same PostgreSQL database, the `revoke` admin
/// command) shows within ``maximumAge`` seconds, the bound PROTOCOL.md section 11 documents. A
/// principals file read again with other rules makes the next fetch rebuild too
/// (``rebuildAtNextFetch()``).
///
/// A rebuild that finds the same revoked devices and CAs keeps the list it had, bytes and
/// entity tag, so that hosts polling with `If-None-Match` get 304 until something changes.
/// While one thread rebuilds a list that is merely old, the others serve the old one; a list
/// that misses a revocation of this process is never served.
final class SSHRevocationListCache: Sendable {
    /// How old a list may get before a fetch rebuilds it: hosts fetch on a timer of minutes.
    static let maximumAge: Int64 = 60

    /// A list as served.
    struct Snapshot: Sendable, Equatable {
        /// The KRL.
        let bytes: [UInt8]
        /// Its strong entity tag (RFC 9110 section 8.8.3), quotes included.
        let entityTag: String
    }

    private struct Built {
        var snapshot: Snapshot
        var revocations: SSHRevocations
        var authorities: [[UInt8]]
        var builtAt: Int64
        var generation: UInt64
    }

    private struct State {
        var built: Built?
        var rebuilding = false
    }

    private let state = Mutex(State())
    private let buildCount = Atomic<Int>(0)
    /// Moved by ``rebuildAtNextFetch()``; a list built before it moved is not served.
    private let forced = Atomic<UInt64>(0)
    private let signal: RevocationSignal
    private let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - signal: the device registry's, told of each revocation in this process.
    ///   - now: the clock, in seconds.
    init(signal: RevocationSignal, now: @escaping @Sendable () -> Int64) {
        self.signal = signal
        self.now = now
    }

    /// How many times a list was built from the device records, for tests and the metrics.
    var builds: Int { buildCount.load(ordering: .relaxed) }

    /// Makes the next fetch build the list again: the principals file was read with other rules,
    /// or a certificate was recorded under the rules before them after a list was built.
    func rebuildAtNextFetch() {
        forced.add(1, ordering: .releasing)
    }

    /// The current list for the CAs `authorities` (public key blobs), built by reading what is
    /// revoked with `revocations` when the cached one is too old, misses a revocation or a
    /// forced rebuild, or names other CAs (a rotation).
    ///
    /// - Throws: what `revocations` throws (the storage's errors), or `KeyAuthError` when the
    ///   list cannot be encoded; nothing is cached then.
    func list(authorities: [[UInt8]], revocations: () throws -> SSHRevocations) throws -> Snapshot {
        // Both counters move together for the comparison: a revocation, or a forced rebuild.
        let generation = signal.generation &+ forced.load(ordering: .acquiring)
        let time = now()
        let cached: (snapshot: Snapshot?, previous: Built?) = state.withLock { state in
            if let built = state.built, built.generation == generation, built.authorities == authorities {
                let fresh = time >= built.builtAt && time < built.builtAt.addingSaturating(Self.maximumAge)
                if fresh || state.rebuilding { return (built.snapshot, nil) }
            }
            state.rebuilding = true
            return (nil, state.built)
        }
        if let snapshot = cached.snapshot { return snapshot }
        do {
            let built = try build(
                authorities: authorities, generation: generation, at: time, revocations: revocations,
                previous: cached.previous)
            state.withLock { state in
                state.rebuilding = false
                // A slower rebuild that started before a revocation must not replace a newer list.
                if let stored = state.built, stored.generation > built.generation { return }
                state.built = built
            }
            return built.snapshot
        } catch {
            state.withLock { $0.rebuilding = false }
            throw error
        }
    }

    private func build(
        authorities: [[UInt8]], generation: UInt64, at time: Int64, revocations read: () throws -> SSHRevocations,
        previous: Built?
    ) throws -> Built {
        buildCount.add(1, ordering: .relaxed)
        let revocations = try read()
        if var same = previous, same.revocations == revocations, same.authorities == authorities {
            same.builtAt = time
            same.generation = generation
            return same
        }
        let bytes = try SSHRevocationList.encoded(
            revoking: revocations, ofAuthorities: authorities, generatedAt: UInt64(clamping: max(time, 0)))
        let digest = try CryptoPrimitives.sha256(bytes)
        let snapshot = Snapshot(bytes: bytes, entityTag: "\"" + Base64URL.encode(Array(digest.prefix(18))) + "\"")
        return Built(
            snapshot: snapshot, revocations: revocations, authorities: authorities, builtAt: time,
            generation: generation)
    }
}

extension SSHRevocationListCache.Snapshot {
    /// Whether an `If-None-Match` field value names this list: `*`, or a list of entity tags
    /// compared weakly (RFC 9110 section 13.1.2), so a `W/` prefix a proxy added still matches.
    func isNamed(byIfNoneMatch field: String?) -> Bool {
        guard let field else { return false }
        for tag in field.split(separator: ",") {
            var text = tag.trimmingWhitespace()
            if text == "*" { return true }
            if text.hasPrefix("W/") { text = String(text.dropFirst(2)) }
            if text == entityTag { return true }
        }
        return false
    }
}
