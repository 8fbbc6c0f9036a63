import KeyAuth
import Synchronization

/// Where the server remembers the `jti` of the device assertions and DPoP proofs it accepted
/// (PROTOCOL.md section 2, rule 7 and "Replay cache"): `--replay-cache`.
package enum ReplayCacheMode: String, Sendable, CaseIterable {
    /// In the server's memory: a login writes nothing and waits for no disk. For a server alone
    /// on its SQLite file (it takes a lock on the file to make sure). What a crash forgets is
    /// covered by the restart rule of ``ReplayGuard``.
    case memory
    /// In the database, durable before the answer leaves: one write and one share of an fsync
    /// per login. The only mode for servers sharing PostgreSQL.
    case database
}

/// What a claim decided.
enum ReplayClaim: Sendable, Equatable {
    /// First use: the token may be accepted.
    case accepted
    /// The `jti` was accepted before.
    case replayed
    /// The token was issued at or before ``ReplayGuard/horizon``: it may have been accepted by
    /// a server that crashed before it could hand its memory on.
    case issuedBeforeRestart
    /// The token expires before the claims this server still remembers: it may have been
    /// accepted and its claim forgotten since. Only a wall clock set back makes such a token
    /// look valid; the verifier refuses it otherwise.
    case forgotten
}

/// The replay rule for device assertions and DPoP proofs, in either ``ReplayCacheMode``.
///
/// In memory the accepted tokens are a set of 64-bit entries (the first 8 bytes of SHA-256 of
/// the key id and the `jti`), in buckets by expiry, so that a lookup is a few hash probes and
/// forgetting a bucket of expired entries is one deallocation. A collision would refuse a fresh
/// token, never accept a used one, and finding one for somebody else's `jti` means a second
/// preimage of 64 bits.
///
/// A clean stop (``stop(storage:now:)``) writes the entries to the database and a marker saying so;
/// the next start takes them back, so a restart refuses what was accepted before it and accepts
/// everything else. A crash (`kill -9`, power loss) leaves only the marker that a memory cache
/// was running. The next start then cannot know which tokens were accepted, but it knows when:
/// before the start. An accepted token's `iat` was at most the verifiers' leeway (10 s) after
/// the moment it was accepted, so every token accepted before the crash has `iat` at or before
/// the start time plus the leeway, the ``horizon``; the server refuses those, and accepts fresh
/// tokens once the clock has passed it. That costs the devices at most the leeway (and the lease,
/// below) after a crash and nothing after a clean stop. The horizon is written down too, so that a server started
/// again soon after (any mode, crashed or not) keeps it while a token issued before it could
/// still be valid.
///
/// "Before the start" holds only while the wall clock does not step back across the restart, so
/// a memory cache also claims under a lease: it writes durably that it may claim tokens until
/// its clock reads ``leaseSeconds`` ahead, renews that every second, and claims nothing past it
/// (a login past it renews first, waiting for the write). A crash's horizon is then the later
/// of the next start and the last lease, plus the leeway: every token the dead server accepted
/// is covered even when the clock was set back before the restart, which then costs the devices
/// the time the clock takes to catch up, not a replay. A clean stop writes how far back the
/// stopped cache had forgotten, so that a clock set back across it does not reopen those
/// claims either (``ReplayClaim/forgotten``); in database mode each cleanup writes the same before
/// it purges.
///
/// In database mode, claims go to storage as before; the guard only applies what a memory cache
/// left behind (its entries, a horizon), so that switching modes never lets a replay through.
final class ReplayGuard: Sendable {
    /// The longest a verifier accepts an `iat` ahead of its clock (assertions and DPoP proofs).
    static let issuedAtLeeway = max(DeviceAssertionVerifier.leeway, DPoPProofVerifier.defaultLeeway)
    /// The marker of a memory cache at work: if it is still there at a start, the server crashed.
    static let runningMarker = "running"
    /// The marker of a clean stop: the rows beside it are every entry still unexpired.
    static let stoppedMarker = "stopped"
    /// The row that hands a crash's ``horizon`` on (its expiry field holds the horizon), so that
    /// a server started soon after keeps refusing what the crash may have accepted.
    static let horizonRow = "horizon"
    /// Until when a marker counts: for ever, in practice.
    static let markerExpiry = Int64(Int32.max) * 4
    /// How long after a horizon a token issued before it could still be valid: the longest
    /// lifetime (an assertion's 300 s, more than a DPoP proof's 60 s) and the leeway after it.
    static let horizonRelevance = DeviceAssertionVerifier.maximumLifetime + 2 * issuedAtLeeway
    /// The row of a memory cache's lease (its expiry field holds the lease's end): what a crash's
    /// horizon starts from when it is later than the next start.
    static let leaseRow = "lease"
    /// How far ahead of the clock a lease reaches. A crash costs the devices up to this more
    /// than the leeway, and a write that stalls for longer holds logins until it completes.
    static let leaseSeconds: Int64 = 5
    /// The row with the expiry before which claims were forgotten: written by a memory cache's
    /// clean stop, and by each cleanup in database mode before it purges.
    static let forgottenRow = "forgotten"

    let mode: ReplayCacheMode
    /// Tokens with `iat` at or before this are refused (after a crash), nil when none are.
    let horizon: Int64?
    /// Memory mode: every claim. Database mode: what a memory cache's clean stop left.
    private let entries: AcceptedTokenSet
    /// Whether ``stop(storage:now:)`` ran; held while the lease is written, so that no renewal
    /// overwrites the stop's snapshot.
    private let stopped = Mutex(false)
    /// Memory mode: the end of the lease written durably; tokens are claimed only before it.
    private let leaseEnds: Atomic<Int64>
    /// Claims expiring before this were deleted from the database by this server's cleanup
    /// (``forgetsClaims(expiringBefore:storage:)``), or forgotten before this start.
    private let forgottenBefore: Atomic<Int64>

    /// Database mode with nothing inherited: for services composed without a start (the admin
    /// commands, tests of the service alone).
    convenience init() {
        self.init(mode: .database, horizon: nil, entries: AcceptedTokenSet(), leaseEnds: .max, forgottenBefore: .min)
    }

    private init(
        mode: ReplayCacheMode, horizon: Int64?, entries: AcceptedTokenSet, leaseEnds: Int64, forgottenBefore: Int64
    ) {
        self.mode = mode
        self.horizon = horizon
        self.entries = entries
        self.leaseEnds = Atomic(leaseEnds)
        self.forgottenBefore = Atomic(forgottenBefore)
    }

    /// Takes over what the last server left in `storage` and writes what a successor needs,
    /// durably, before the server answers anything: in memory mode the marker of a running
    /// cache and its first lease; in either mode a horizon still in force, and in database mode
    /// how far back claims were forgotten.
    ///
    /// - Throws: ``StorageError``.
    static func start(mode: ReplayCacheMode, storage: any ServerStorage, now: Int64) throws(StorageError)
        -> ReplayGuard
    {
        let rows = try storage.replaySnapshot()
        let names = Set(rows.map(\.name))
        let crashed = names.contains(runningMarker) && !names.contains(stoppedMarker)
        let lastLease = rows.first { $0.name == leaseRow }?.expiresAt
        // The dead server claimed nothing past its lease, even if the clock has since been set
        // back before it.
        var horizon = crashed ? max(now, lastLease ?? now).addingSaturating(issuedAtLeeway) : nil
        if let inherited = rows.first(where: { $0.name == horizonRow })?.expiresAt,
            now <= inherited.addingSaturating(horizonRelevance)
        {
            horizon = max(horizon ?? inherited, inherited)
        }
        let entries = AcceptedTokenSet()
        for row in rows where row.expiresAt >= now && row.name.count == 16 {
            if let entry = UInt64(row.name, radix: 16) { entries.insert(entry, expiresAt: row.expiresAt, now: now) }
        }
        var successor = horizon.map { [ReplaySnapshotRow(name: horizonRow, expiresAt: $0)] } ?? []
        // Never moved back: a lease a clock set back leaves ahead still binds.
        let lease = max(now.addingSaturating(leaseSeconds), lastLease ?? .min)
        let forgotten = rows.first { $0.name == forgottenRow }?.expiresAt
        switch mode {
        case .memory:
            // Claims a database-mode server recorded are still binding.
            for claim in try storage.claimedJTIs(expiringAfter: now) {
                entries.insert(
                    AcceptedTokenSet.entry(keyID: claim.keyID, jti: claim.jti), expiresAt: claim.expiresAt, now: now)
            }
            // The entries stay in memory only: if this server crashes, the next horizon covers
            // them, since they were accepted before this start.
            successor.append(ReplaySnapshotRow(name: runningMarker, expiresAt: markerExpiry))
            successor.append(ReplaySnapshotRow(name: leaseRow, expiresAt: lease))
        case .database:
            // Kept for a successor, since this server's crash leaves no marker.
            if let forgotten { successor.append(ReplaySnapshotRow(name: forgottenRow, expiresAt: forgotten)) }
            successor += ReplaySnapshot(markers: [], buckets: entries.snapshot(now: now)).rows
        }
        if successor != rows { try storage.replaceReplaySnapshot(with: ReplaySnapshot(markers: successor)) }
        return ReplayGuard(
            mode: mode, horizon: horizon, entries: entries, leaseEnds: mode == .memory ? lease : .max,
            forgottenBefore: forgotten ?? .min)
    }

    /// Memory mode: writes durably that this cache may claim tokens until `now` plus
    /// ``leaseSeconds``, and then does. Every second from the server's timer; from a claim when
    /// the lease has run out (`onlyIfLapsed`: a claim that waited for another's renewal writes
    /// nothing). Nothing after ``stop(storage:now:)``.
    ///
    /// - Throws: ``StorageError``: claims then wait for a renewal that succeeds.
    func renewLease(storage: any ServerStorage, now: Int64, onlyIfLapsed: Bool = false) throws(StorageError) {
        guard mode == .memory else { return }
        try stopped.withLock { done throws(StorageError) in
            guard !done, !onlyIfLapsed || now >= leaseEnds.load(ordering: .acquiring) else { return }
            let end = now.addingSaturating(Self.leaseSeconds)
            // Durable before any claim relies on it, also when a login renews it: inside the
            // login's scope the write would return with its batch still open, and the other
            // logins, which do not wait for that batch, would claim under a lease a crash loses.
            let written = DurabilityScope.$current.withValue(nil) {
                Result { () throws(StorageError) in
                    try storage.raiseReplaySnapshotRow(ReplaySnapshotRow(name: Self.leaseRow, expiresAt: end))
                }
            }
            try written.get()
            leaseEnds.max(end, ordering: .releasing)
        }
    }

    /// Records that the token `jti` of `keyID`, issued at `issuedAt`, was accepted, until
    /// `expiresAt`; in database mode in `storage`, durably.
    ///
    /// - Throws: ``StorageError`` (database mode).
    func claim(
        keyID: String, jti: String, issuedAt: Int64, expiresAt: Int64, storage: any ServerStorage, now: Int64
    ) throws(StorageError) -> ReplayClaim {
        if let horizon, issuedAt <= horizon { return .issuedBeforeRestart }
        if expiresAt < forgottenBefore.load(ordering: .relaxed) { return .forgotten }
        let entry = AcceptedTokenSet.entry(keyID: keyID, jti: jti)
        switch mode {
        case .memory:
            if now >= leaseEnds.load(ordering: .acquiring) {
                try renewLease(storage: storage, now: now, onlyIfLapsed: true)
                guard now < leaseEnds.load(ordering: .acquiring) else {
                    throw StorageError(.unavailable, "the replay cache has stopped")
                }
            }
            switch entries.insert(entry, expiresAt: expiresAt, now: now) {
            case .inserted: return .accepted
            case .present: return .replayed
            case .forgotten: return .forgotten
            }
        case .database:
            if entries.contains(entry) { return .replayed }
            return try storage.claimJTI(keyID: keyID, jti: jti, expiresAt: expiresAt) ? .accepted : .replayed
        }
    }

    /// Notes, before the cleanup deletes the database's claims expiring before `horizon`, that a
    /// token expiring before it, which only a wall clock set back can make look valid again, is
    /// to be refused rather than claimed anew; in database mode durably too, for the next start.
    ///
    /// - Throws: ``StorageError``; the cleanup then must not purge.
    func forgetsClaims(expiringBefore horizon: Int64, storage: any ServerStorage) throws(StorageError) {
        if mode == .database {
            try storage.raiseReplaySnapshotRow(ReplaySnapshotRow(name: Self.forgottenRow, expiresAt: horizon))
        }
        forgottenBefore.max(horizon, ordering: .relaxed)
    }

    /// The earliest expiry a token may have and still be claimed: tokens expiring before it
    /// are ``ReplayClaim/forgotten``. Far in the past while the clock only moves forward.
    var forgetsBefore: Int64 {
        max(forgottenBefore.load(ordering: .relaxed), entries.forgetsBefore)
    }

    /// Seconds until fresh tokens are accepted again after a crash, for the refusal's text.
    func secondsUntilPastHorizon(now: Int64) -> Int64 {
        guard let horizon, horizon >= now else { return 0 }
        let (difference, overflow) = horizon.subtractingReportingOverflow(now)
        return overflow ? .max : difference.addingSaturating(1)
    }

    /// After the last request: in memory mode, writes the unexpired entries, how far back the
    /// cache has forgotten and the marker of a clean stop, in one durable transaction. Once;
    /// later calls do nothing, and so do lease renewals.
    ///
    /// - Throws: ``StorageError``; the marker of a running cache then stays, and the next start
    ///   applies the restart rule.
    func stop(storage: any ServerStorage, now: Int64) throws(StorageError) {
        guard mode == .memory,
            !stopped.withLock({ done in
                defer { done = true }; return done
            })
        else { return }
        var markers = [ReplaySnapshotRow(name: Self.stoppedMarker, expiresAt: Self.markerExpiry)]
        if let horizon { markers.append(ReplaySnapshotRow(name: Self.horizonRow, expiresAt: horizon)) }
        if forgetsBefore > .min { markers.append(ReplaySnapshotRow(name: Self.forgottenRow, expiresAt: forgetsBefore)) }
        try storage.replaceReplaySnapshot(with: ReplaySnapshot(markers: markers, buckets: entries.snapshot(now: now)))
    }
}

/// The entries of accepted tokens, in buckets of ``bucketSeconds`` by expiry, under one lock.
final class AcceptedTokenSet: Sendable {
    /// The span of expiry times one bucket holds. A lookup probes every live bucket: about ten
    /// for the longest lifetime (300 s plus leeway).
    static let bucketSeconds: Int64 = 32

    private struct State {
        var buckets: [Int64: Set<UInt64>] = [:]
        /// Buckets whose whole span is before this are gone.
        var purgedBefore: Int64 = .min
    }
    private let state = Mutex(State())

    /// The entry of `jti` of `keyID`: 8 bytes of SHA-256 over both, separated by a byte neither
    /// can contain.
    static func entry(keyID: String, jti: String) -> UInt64 {
        var input: [UInt8] = []
        input.reserveCapacity(keyID.utf8.count + 1 + jti.utf8.count)
        input.append(contentsOf: keyID.utf8)
        input.append(0)
        input.append(contentsOf: jti.utf8)
        // SHA-256 fails only when OpenSSL cannot allocate; the key id's first bytes then stand
        // in, so that a key's tokens collide and are refused, never wrongly accepted.
        let digest = (try? CryptoPrimitives.sha256(input)) ?? input
        var value: UInt64 = 0
        for byte in digest.prefix(8) { value = value << 8 | UInt64(byte) }
        return value
    }

    /// What ``insert(_:expiresAt:now:)`` did.
    enum Insertion: Equatable {
        case inserted
        /// The entry was there already.
        case present
        /// Its expiry falls in a bucket already taken out: whether it was there cannot be told.
        case forgotten
    }

    /// Adds `entry` until `expiresAt`, unless it is there already or its bucket is gone.
    ///
    /// A bucket goes once its whole span is before the clock, so a token the verifier accepts
    /// never expires in one. But when the wall clock is set back, a token that expired (and
    /// whose entry went with its bucket) looks valid again: it was accepted once, and taking it
    /// into a new bucket would accept it twice. It is refused instead.
    @discardableResult
    func insert(_ entry: UInt64, expiresAt: Int64, now: Int64) -> Insertion {
        let bucket = expiresAt / Self.bucketSeconds
        let (insertion, expired) = state.withLock { state -> (Insertion, [Set<UInt64>]) in
            guard bucket >= state.purgedBefore else { return (.forgotten, []) }
            guard !Self.contains(entry, in: state) else { return (.present, []) }
            state.buckets[bucket, default: []].insert(entry)
            return (.inserted, Self.removeExpired(from: &state, now: now))
        }
        withExtendedLifetime(expired) {}  // expired buckets are freed here, outside the lock
        return insertion
    }

    /// The earliest expiry an entry can still be inserted with (the first live bucket's start).
    var forgetsBefore: Int64 {
        state.withLock { $0.purgedBefore.multipliedSaturating(by: Self.bucketSeconds) }
    }

    /// Whether `entry` is there.
    func contains(_ entry: UInt64) -> Bool {
        state.withLock { Self.contains(entry, in: $0) }
    }

    /// The unexpired buckets: each one's last second and its entries, shared with the set, not
    /// copied (until the set changes them).
    func snapshot(now: Int64) -> [(expiresAt: Int64, entries: Set<UInt64>)] {
        state.withLock { state in
            state.buckets.compactMap { bucket, entries in
                // Saturating: an expiry read back from storage may be anything.
                let end = (bucket + 1).multipliedSaturating(by: Self.bucketSeconds) - 1
                return end < now ? nil : (end, entries)
            }
        }
    }

    private static func contains(_ entry: UInt64, in state: State) -> Bool {
        state.buckets.values.contains { $0.contains(entry) }
    }

    /// Takes out the buckets whose span ended before `now`: at most once per bucket span.
    private static func removeExpired(from state: inout State, now: Int64) -> [Set<UInt64>] {
        let firstLive = now / bucketSeconds
        guard firstLive > state.purgedBefore else { return [] }
        state.purgedBefore = firstLive
        var removed: [Set<UInt64>] = []
        for bucket in state.buckets.keys where bucket < firstLive {
            if let entries = state.buckets.removeValue(forKey: bucket) { removed.append(entries) }
        }
        return removed
    }
}
