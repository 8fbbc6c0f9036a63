import KeyAuth

/// The administrator's view of the server's signing keys: listing them with their states, and
/// rotating to a new key (`keyauth-server keys list|rotate`, PROTOCOL.md section 7).
///
/// A rotation only inserts a row: the new key is published by every instance at its next reload
/// (within a minute, the cleanup interval) and signs from `now + delay`, by then in every cache
/// that honours the JWKS's `max-age`. The old key stops signing at that moment and is retired by
/// the periodic cleanup once its last token has expired (``SigningKeySchedule``).
struct SigningKeyRotation: Sendable {
    /// Ten minutes: longer than the JWKS's `max-age` (300 s) plus an instance's reload (60 s),
    /// so that a service that cached the set before the rotation refetches it before any token
    /// names the new key (and AccessTokenVerifier refetches on an unknown `kid` anyway).
    static let defaultDelay: Int64 = 600

    /// One key as `keys list` shows it.
    struct Listing: Sendable, Equatable {
        let kid: String
        let algorithm: JWSAlgorithm
        let state: SigningKeySchedule.State
        let createdAt: Int64
        let activeFrom: Int64
        /// When it was retired, or will be (a previous key); nil for next and current keys, and
        /// for a previous key that still signs ID tokens.
        let retiresAt: Int64?
        /// Whether it is a previous key that still signs ID tokens: the newest RS256 key while
        /// access tokens are signed by a key of another algorithm (PROTOCOL.md section 10).
        var signsIDTokens = false
    }

    let storage: any ServerStorage
    /// The access-token lifetime the servers use, which decides when a previous key retires.
    let tokenLifetime: Int64
    let now: @Sendable () -> Int64

    /// Every key, retired ones included, in the order they take over signing.
    func list() throws -> [Listing] {
        var records = try storage.signingKeys(includingRetired: true)
        for index in records.indices { CryptoPrimitives.wipe(&records[index].privatePEM) }
        let schedule = SigningKeySchedule(
            records.map {
                SigningKeySchedule.Entry(
                    kid: $0.kid, algorithm: $0.algorithm, createdAt: $0.createdAt, activeFrom: $0.activeFrom,
                    retiredAt: $0.retiredAt)
            })
        let time = now()
        let states = schedule.states(at: time)
        let idTokenKID = schedule.currentKeyID(at: time, algorithm: .rs256)
        return schedule.entries.compactMap { entry in
            guard let state = states[entry.kid] else { return nil }
            var signsIDTokens = false
            if case .previous = state { signsIDTokens = entry.kid == idTokenKID }
            let retiresAt: Int64? =
                switch state {
                case .retired(let time): time
                case .previous where signsIDTokens: nil
                case .previous(let signedUntil):
                    SigningKeySchedule.retirement(
                        signedUntil: signedUntil, tokenLifetime: tokenLifetime, leeway: DeviceAssertionVerifier.leeway)
                case .next, .current: nil
                }
            return Listing(
                kid: entry.kid, algorithm: entry.algorithm, state: state, createdAt: entry.createdAt,
                activeFrom: entry.activeFrom, retiresAt: retiresAt, signsIDTokens: signsIDTokens)
        }
    }

    /// The algorithm of the key signing now, or nil when there is none.
    func currentAlgorithm() throws -> JWSAlgorithm? {
        try list().first { $0.state == .current }?.algorithm
    }

    /// The size of the newest RSA key not retired, or nil when there is none: a rotation keeps
    /// the size `--signing-key-bits` gave the first key, where a fixed 2048 would quietly shrink
    /// a 4096-bit deployment's key at its first rotation.
    func newestRSABits() throws -> Int? {
        var records = try storage.signingKeys(includingRetired: false)
        defer { for index in records.indices { CryptoPrimitives.wipe(&records[index].privatePEM) } }
        guard let newest = records.filter({ $0.algorithm == .rs256 }).max(by: { $0.activeFrom < $1.activeFrom }),
            case .rsa(let key) = try JWSPrivateKey(pemRepresentation: newest.privatePEM)
        else { return nil }
        return key.publicKey.bits
    }

    /// Generates a key for `algorithm` and stores it to sign from `now + delay`, or from a second
    /// after the latest key's `active_from` when that is later (two rotations in one second), so
    /// that no two keys ever share an `active_from` and the newer always takes over.
    ///
    /// - Parameter rsaBits: the size of an RSA key.
    /// - Returns: the new key's `kid` and when it starts signing.
    /// - Throws: ``StorageError``; `KeyAuthError` when the key cannot be made.
    func rotate(to algorithm: JWSAlgorithm, delay: Int64 = defaultDelay, rsaBits: Int = 2048) throws -> (
        kid: String, activeFrom: Int64
    ) {
        let key = try JWSPrivateKey.generate(for: algorithm, rsaBits: rsaBits)
        var pem = try key.pkcs8PEM()
        defer { CryptoPrimitives.wipe(&pem) }
        let created = now()
        var existing = try storage.signingKeys(includingRetired: true)
        let latest = existing.map(\.activeFrom).max() ?? .min
        for index in existing.indices { CryptoPrimitives.wipe(&existing[index].privatePEM) }
        let record = SigningKeyRecord(
            kid: key.keyID, privatePEM: pem, createdAt: created, algorithm: algorithm,
            activeFrom: max(created.addingSaturating(delay), latest.addingSaturating(1)))
        guard try storage.insertSigningKey(record) else {
            throw KeyAuthError(.keyExists, "a signing key with the new key's kid exists already")
        }
        return (key.keyID, record.activeFrom)
    }
}
