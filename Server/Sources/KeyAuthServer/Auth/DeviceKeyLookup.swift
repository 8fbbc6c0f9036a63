import KeyAuth
import Synchronization

/// The login resolver: finds an assertion's key among registered devices and remembers the
/// device it found, for the state check that follows verification (PROTOCOL.md section 2,
/// rules 3 and 8).
///
/// A revoked device resolves exactly like an unknown key, so the verifier reports both (and a
/// bad signature) with the same error and description: nobody can probe which keys exist or were
/// revoked. Both resolve to a decoy key whose private half was discarded at startup, so they
/// also cost the same RSA verification as a registered key with a bad signature, leaving no
/// timing difference to probe either. Revocation holds for assertions signed before it, since
/// the lookup happens at verification time: the device record is read on every request, and
/// only the parsing of its key is cached (``DeviceKeyCache``). One instance per request.
final class DeviceKeyLookup: JWTKeyResolver {
    private let storage: any ServerStorage
    private let keys: DeviceKeyCache
    private let found = Mutex<DeviceRecord?>(nil)

    init(storage: any ServerStorage, keys: DeviceKeyCache) {
        self.storage = storage
        self.keys = keys
    }

    /// The device the last lookup returned a key for.
    var device: DeviceRecord? {
        found.withLock { $0 }
    }

    /// A key that no one can sign for: made at startup, its private key dropped at once.
    static let decoy: RSAPublicKey? = try? RSAPrivateKey.generate(bits: 2048).publicKey

    func publicKey(forKeyID keyID: String) throws -> RSAPublicKey? {
        guard let device = try storage.device(kid: keyID), device.status != .revoked else { return Self.decoy }
        let key: RSAPublicKey
        do {
            key = try keys.key(kid: keyID, pem: device.publicKeyPEM)
        } catch {
            // A stored key that no longer parses is the server's problem, not a bad assertion.
            throw StoredKeyUnreadable(kid: keyID)
        }
        found.withLock { $0 = device }
        return key
    }
}

/// A registered device's stored public key cannot be parsed: a 500, never an `invalid_grant`.
struct StoredKeyUnreadable: Error, Sendable {
    let kid: String
}

/// The replay cache of assertions, in storage so that it survives restarts (rule 7).
struct StorageReplayCache: JWTReplayCache {
    let storage: any ServerStorage
    /// Added to `exp`: the verifier accepts a token until `exp + leeway`, so its `jti` must be
    /// remembered at least that long.
    let leeway: Int64

    func claim(jwtID: String, keyID: String, expiresAt: Int64) throws -> Bool {
        try storage.claimJTI(keyID: keyID, jti: jwtID, expiresAt: expiresAt + leeway)
    }
}
