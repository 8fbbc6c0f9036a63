import KeyAuth
import Synchronization

/// The server's signing keys: loaded from storage (created on first start) and rotated there,
/// or the one key of the operator's key file (`ServerSigningKeys+File.swift`).
///
/// Which key signs is decided per token by ``SigningKeySchedule`` from the loaded rows and the
/// clock, so a rotation takes effect at its `active_from` on every instance. The rows are read
/// again by the periodic cleanup and, at most every ``reloadInterval`` seconds, when a token
/// names a key this instance has not loaded (a key another instance or `keys rotate` added);
/// keys already parsed are kept, so a reload parses only new keys.
final class ServerSigningKeys: Sendable {
    /// A loaded key. A class, so that taking the current key out of the shared table for each
    /// token is one retain.
    final class LoadedKey: Sendable {
        /// The public key's thumbprint: the `kid` of the tokens it signs.
        let kid: String
        /// The key's dates.
        let entry: SigningKeySchedule.Entry
        /// Signs with the key, its `kid` computed once.
        let signer: ServerSigner
        /// The secret the server's DPoP nonces are made with under this key: a hash of the
        /// private key, so that every instance holding the key makes and accepts the same
        /// nonces without sharing anything else (``ServerNonces``).
        let nonceSecret: [UInt8]
        /// What the JWK set publishes and verification uses.
        var publicKey: JWSPublicKey { signer.key.publicKey }
        /// The key as the JWK set publishes it: with `kid`, `alg` and `use`.
        var jwk: JSONValue {
            publicKey.jwk.jsonValue(extra: [
                "kid": .string(kid), "alg": .string(entry.algorithm.rawValue), "use": "sig",
            ])
        }

        init(kid: String, entry: SigningKeySchedule.Entry, signer: ServerSigner, nonceSecret: [UInt8]) {
            self.kid = kid
            self.entry = entry
            self.signer = signer
            self.nonceSecret = nonceSecret
        }
    }

    /// The fewest seconds between two reloads for an unknown `kid`, so that tokens naming made-up
    /// keys cannot make every request read the database: one read of the few key rows a second
    /// at most. Short, because such a reload is also how an instance learns of a key that
    /// another instance already signs with (`keys rotate --delay 0`): a token of that key is
    /// refused only if another reload came less than this before the key was stored.
    static let reloadInterval: Int64 = 1

    private struct Loaded: Sendable {
        var keys: [String: LoadedKey] = [:]
        var schedule = SigningKeySchedule([])
        /// When a token's unknown `kid` last made this instance reload; the cleanup's reloads do
        /// not count, so that they never hold back the next one.
        var lastUnknownKeyReload: Int64 = .min
        /// The JWK set's JSON text with its final newline, written when the keys change instead
        /// of for every request: relying parties poll the route, and writing the text (a JSON
        /// tree, every modulus in base64url) took about a third of each request's time.
        var jwksText: [UInt8] = []

        /// The keys in the order they take over signing.
        var published: [LoadedKey] = []

        /// Takes `keys` as the loaded keys, their schedule, their order and their JWK set.
        mutating func publish(_ keys: [String: LoadedKey]) {
            self.keys = keys
            schedule = SigningKeySchedule(keys.values.map(\.entry))
            published = schedule.entries.compactMap { keys[$0.kid] }
            jwksText = Array(JSONValue.object(["keys": .array(published.map(\.jwk))]).serialized().utf8)
            jwksText.append(UInt8(ascii: "\n"))
        }
    }

    /// Where the keys come from: storage, or nil for a key file (never reloaded nor rotated).
    private let storage: (any ServerStorage)?
    private let loaded: Mutex<Loaded>

    /// Whether the keys rotate through storage; false for `--signing-key-file`.
    var rotates: Bool { storage != nil }

    /// Keys that do not come from storage (the key file): `key` signs from the beginning of time.
    ///
    /// - Throws: `KeyAuthError` when the nonce secret cannot be derived, or the key cannot be
    ///   written out to derive it from: the secret comes from the private key only, never from
    ///   anything public such as its `kid`.
    init(fixed key: JWSPrivateKey) throws(KeyAuthError) {
        storage = nil
        let signer = ServerSigner(key)
        let entry = SigningKeySchedule.Entry(
            kid: signer.keyID, algorithm: key.algorithm, createdAt: 0, activeFrom: 0, retiredAt: nil)
        var state = Loaded()
        var pem = try key.pkcs8PEM()
        defer { CryptoPrimitives.wipe(&pem) }
        state.publish([
            signer.keyID: LoadedKey(
                kid: signer.keyID, entry: entry, signer: signer, nonceSecret: try Self.nonceSecret(privatePEM: pem))
        ])
        loaded = Mutex(state)
    }

    /// Keys read from `storage` now; ``reload(now:)`` reads them again.
    ///
    /// - Throws: ``StorageError``; `KeyAuthError` when a stored key cannot be read or does not
    ///   match its `kid`, or when there is none (the server must not start with a key it cannot
    ///   use).
    init(storage: any ServerStorage, now: Int64) throws {
        self.storage = storage
        loaded = Mutex(Loaded())
        try reload(now: now)
        guard loaded.withLock({ !$0.keys.isEmpty }) else {
            throw KeyAuthError(.keyNotFound, "no server signing key")
        }
    }

    /// Loads the stored keys, generating and storing a key for `algorithm` when there is none.
    ///
    /// - Parameter rsaBits: the size of a generated RSA key.
    /// - Throws: as ``init(storage:now:)``.
    static func loadOrCreate(
        storage: any ServerStorage, algorithm: JWSAlgorithm = .rs256, rsaBits: Int = 2048, now: Int64
    ) throws -> ServerSigningKeys {
        if try storage.signingKeys().isEmpty {
            let key = try JWSPrivateKey.generate(for: algorithm, rsaBits: rsaBits)
            var pem = try key.pkcs8PEM()
            defer { CryptoPrimitives.wipe(&pem) }
            let record = SigningKeyRecord(kid: key.keyID, privatePEM: pem, createdAt: now, algorithm: algorithm)
            // Only the first of several servers starting together stores its key; the others read
            // it back and sign with it too. A store whose every key was retired gets a new one.
            if try !storage.insertFirstSigningKey(record), try storage.signingKeys().isEmpty {
                _ = try storage.insertSigningKey(record)
            }
        }
        try ensureIDTokenKey(storage: storage, rsaBits: rsaBits, now: now)
        return try ServerSigningKeys(storage: storage, now: now)
    }

    /// Adds an RS256 key for ID tokens when no published key is RS256 (`--token-alg ES256` or
    /// `EdDSA`): OpenID Connect requires RS256 ID tokens. It is stored with `active_from` 0, so
    /// it sorts before every other key and never signs access tokens while a key of the
    /// configured algorithm is published; ``SigningKeySchedule/retirable(at:tokenLifetime:leeway:)``
    /// never retires the RS256 key that signs ID tokens.
    private static func ensureIDTokenKey(storage: any ServerStorage, rsaBits: Int, now: Int64) throws {
        guard try !storage.signingKeys().contains(where: { $0.algorithm == .rs256 }) else { return }
        let key = try JWSPrivateKey.generate(for: .rs256, rsaBits: rsaBits)
        var pem = try key.pkcs8PEM()
        defer { CryptoPrimitives.wipe(&pem) }
        // Of several servers starting together, only the first stores its key; the others read
        // it back when they load the keys.
        _ = try storage.insertIDTokenKey(
            SigningKeyRecord(kid: key.keyID, privatePEM: pem, createdAt: now, algorithm: .rs256, activeFrom: 0))
    }

    /// Reads the stored keys again: new ones are parsed and published, retired ones dropped.
    ///
    /// - Throws: ``StorageError``; `KeyAuthError` for a stored key that cannot be read or does
    ///   not match its `kid` (the keys loaded before stay in use).
    func reload(now: Int64) throws {
        guard let storage else { return }
        var records = try storage.signingKeys()
        defer {
            for index in records.indices { CryptoPrimitives.wipe(&records[index].privatePEM) }
        }
        let known = loaded.withLock { $0.keys }
        var keys: [String: LoadedKey] = [:]
        for record in records {
            let entry = SigningKeySchedule.Entry(
                kid: record.kid, algorithm: record.algorithm, createdAt: record.createdAt,
                activeFrom: record.activeFrom, retiredAt: record.retiredAt)
            if let existing = known[record.kid] {
                keys[record.kid] = LoadedKey(
                    kid: record.kid, entry: entry, signer: existing.signer, nonceSecret: existing.nonceSecret)
                continue
            }
            let key = try JWSPrivateKey(pemRepresentation: record.privatePEM)
            guard key.keyID == record.kid, key.algorithm == record.algorithm else {
                throw KeyAuthError(
                    .keyCorrupt, "the stored signing key \(record.kid) does not match its kid and algorithm")
            }
            keys[record.kid] = LoadedKey(
                kid: record.kid, entry: entry, signer: ServerSigner(key),
                nonceSecret: try Self.nonceSecret(privatePEM: record.privatePEM))
        }
        loaded.withLock { $0.publish(keys) }
    }

    /// SHA-256 over a label and the private key: a secret only the key's holders can compute.
    private static func nonceSecret(privatePEM: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.sha256(Array("keyauth DPoP nonce secret\n".utf8) + privatePEM)
    }

    /// The key that signs at `now`.
    ///
    /// - Throws: `KeyAuthError` `.keyNotFound` when no key is loaded (never after a successful
    ///   start: the current key is never retired).
    func current(at now: Int64) throws(KeyAuthError) -> LoadedKey {
        let key = loaded.withLock { state in state.schedule.currentKeyID(at: now).flatMap { state.keys[$0] } }
        guard let key else { throw KeyAuthError(.keyNotFound, "no server signing key") }
        return key
    }

    /// The RS256 key that signs ID tokens at `now`: the current key when it is RS256, else the
    /// newest RS256 key whose `active_from` has passed (PROTOCOL.md section 10, "Keys").
    ///
    /// - Throws: `KeyAuthError` `.keyNotFound` when no RS256 key is published.
    func currentRS256(at now: Int64) throws(KeyAuthError) -> LoadedKey {
        let key = loaded.withLock { state -> LoadedKey? in
            let current = state.schedule.currentKeyID(at: now).flatMap { state.keys[$0] }
            if let current, current.entry.algorithm == .rs256 { return current }
            return state.schedule.currentKeyID(at: now, algorithm: .rs256).flatMap { state.keys[$0] }
        }
        guard let key else { throw KeyAuthError(.keyNotFound, "no RS256 server signing key for ID tokens") }
        return key
    }

    /// The published key `keyID`: only our own keys verify access tokens. An unknown `kid`
    /// reloads the keys first, at most every ``reloadInterval`` seconds; a reload that fails
    /// leaves the keys as they were.
    func publicKey(forKeyID keyID: String, now: Int64) -> JWSPublicKey? {
        // The check and the claim of the reload under one lock: of many requests naming unknown
        // keys at once, one reloads.
        let (key, due) = loaded.withLock { state -> (JWSPublicKey?, Bool) in
            if let key = state.keys[keyID]?.publicKey { return (key, false) }
            guard state.lastUnknownKeyReload <= now.subtractingSaturating(Self.reloadInterval) else {
                return (nil, false)
            }
            state.lastUnknownKeyReload = now
            return (nil, true)
        }
        if let key { return key }
        guard rotates, due else { return nil }
        try? reload(now: now)
        return loaded.withLock { $0.keys[keyID]?.publicKey }
    }

    /// The published keys as loaded, in the order they take over signing: what sealed
    /// authorizations and DPoP nonces are checked against.
    var keys: [LoadedKey] { loaded.withLock { $0.published } }

    /// The JSON text of `/.well-known/jwks.json`, ending with a newline: every published key
    /// (next, current and previous) with `kid`, `alg` and `use`, in the order they take over
    /// signing. Written when the keys were loaded.
    var jwks: [UInt8] { loaded.withLock { $0.jwksText } }

    /// Retires the previous keys whose last token has expired at `now` (after a reload, so that
    /// the decision uses what every instance sees), and drops them from the JWK set.
    ///
    /// - Returns: the retired keys' `kid`s (those another instance retired first are not
    ///   included).
    /// - Throws: ``StorageError``; `KeyAuthError` from the reload.
    @discardableResult
    func retireExpired(now: Int64, tokenLifetime: Int64, leeway: Int64) throws -> [String] {
        guard let storage else { return [] }
        try reload(now: now)
        let candidates = loaded.withLock {
            $0.schedule.retirable(at: now, tokenLifetime: tokenLifetime, leeway: leeway)
        }
        var retired: [String] = []
        for kid in candidates where try storage.retireSigningKey(kid: kid, at: now) {
            retired.append(kid)
        }
        if !candidates.isEmpty { try reload(now: now) }
        return retired
    }
}

/// A server key as a ``JWSSigner`` whose `kid`, and the encoded header of the access tokens it
/// signs, are computed once, not for every token.
struct ServerSigner: JWSSigner {
    let key: JWSPrivateKey
    let keyID: String
    /// The base64url `{"alg":...,"typ":"at+jwt","kid":...}` of every access token it signs.
    let accessTokenHeader: String

    init(_ key: JWSPrivateKey) {
        self.key = key
        keyID = key.keyID
        accessTokenHeader = Base64URL.encode(
            JWTBuilder.header(algorithm: key.algorithm, type: AccessTokens.type, keyID: keyID))
    }

    var algorithm: JWSAlgorithm { key.algorithm }

    func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try key.signature(for: message)
    }
}
