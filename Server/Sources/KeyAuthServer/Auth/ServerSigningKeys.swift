import KeyAuth

/// The server's RSA signing keys, loaded from storage or created on first start, or read from
/// the operator's key file (`ServerSigningKeys+File.swift`).
///
/// The oldest stored key signs access tokens; every stored key is published in the JWKS, so a
/// key added later (by a rotation, or by a second server that raced on an empty store) keeps
/// verifying the tokens it signed.
final class ServerSigningKeys: Sendable {
    /// The key that signs access tokens.
    let signingKey: RSAPrivateKey
    /// Its fingerprint: the `kid` of issued tokens.
    let signingKeyID: String
    /// Every published key by `kid`.
    let publicKeys: [String: RSAPublicKey]
    /// The published order (oldest first).
    private let order: [String]

    /// The keys `records` (oldest first): the first signs, all are published.
    init(records: [(kid: String, key: RSAPrivateKey)]) throws(KeyAuthError) {
        guard let first = records.first else { throw KeyAuthError(.keyNotFound, "no server signing key") }
        signingKey = first.key
        signingKeyID = first.kid
        var keys: [String: RSAPublicKey] = [:]
        for record in records { keys[record.kid] = record.key.publicKey }
        publicKeys = keys
        order = records.map(\.kid)
    }

    /// Loads the stored keys, generating and storing one of `bits` when there is none.
    ///
    /// - Throws: ``StorageError`` when storage fails, `KeyAuthError` when a stored key cannot
    ///   be read (the server must not start with a key it cannot use).
    static func loadOrCreate(storage: any ServerStorage, bits: Int, now: Int64) throws -> ServerSigningKeys {
        var records = try storage.signingKeys()
        if records.isEmpty {
            let key = try RSAPrivateKey.generate(bits: bits)
            var pem = try key.pkcs8PEM()
            defer { CryptoPrimitives.wipe(&pem) }
            // Only the first of several servers starting together stores its key; the others read
            // it back and sign with it too.
            _ = try storage.insertFirstSigningKey(kid: key.publicKey.fingerprint, privatePEM: pem, createdAt: now)
            records = try storage.signingKeys()
        }
        var loaded: [(kid: String, key: RSAPrivateKey)] = []
        for var record in records {
            defer { CryptoPrimitives.wipe(&record.privatePEM) }
            let key = try RSAPrivateKey(pemRepresentation: record.privatePEM)
            guard key.publicKey.fingerprint == record.kid else {
                throw KeyAuthError(.keyCorrupt, "the stored signing key \(record.kid) does not match its kid")
            }
            loaded.append((record.kid, key))
        }
        return try ServerSigningKeys(records: loaded)
    }

    /// The JWK set of `/.well-known/jwks.json`: `kty`, `n`, `e`, `kid`, `alg`, `use`.
    var jwks: JSONValue {
        .object([
            "keys": .array(
                order.compactMap { kid in
                    publicKeys[kid]?.jwk.jsonValue(extra: ["kid": .string(kid), "alg": "RS256", "use": "sig"])
                })
        ])
    }

    /// The published key `keyID`: only our own keys verify access tokens.
    func publicKey(forKeyID keyID: String) -> RSAPublicKey? {
        publicKeys[keyID]
    }
}
