/// A private key of any of the three types keyauth signs with: what a server keeps to sign
/// access tokens, whatever `--token-alg` chose.
///
/// Device keys stay ``RSAPrivateKey`` (or a TPM key); this type is for keys that arrive as PEM
/// of a type known only once read (the server's stored keys, `--signing-key-file`).
package enum JWSPrivateKey: Sendable {
    /// An RSA key, signing RS256.
    case rsa(RSAPrivateKey)
    /// An EC P-256 key, signing ES256.
    case p256(P256PrivateKey)
    /// An Ed25519 key, signing EdDSA.
    case ed25519(Ed25519PrivateKey)

    /// Generates a key for `algorithm`.
    ///
    /// - Parameters:
    ///   - algorithm: the algorithm the key will sign with.
    ///   - rsaBits: the size of an RSA key (2048, 3072 or 4096).
    /// - Throws: `.invalidArgument` for an RSA size outside those; `.cryptoFailed` if OpenSSL
    ///   fails.
    package static func generate(for algorithm: JWSAlgorithm, rsaBits: Int = 2048) throws(KeyAuthError)
        -> JWSPrivateKey
    {
        switch algorithm {
        case .rs256: .rsa(try RSAPrivateKey.generate(bits: rsaBits))
        case .es256: .p256(try P256PrivateKey.generate())
        case .edDSA: .ed25519(try Ed25519PrivateKey.generate())
        }
    }

    /// Reads an unencrypted private key PEM of any of the three types.
    ///
    /// - Throws: `.keyEncrypted` for an encrypted PEM; `.keyCorrupt` for anything that is not a
    ///   private key; `.keyRejected` for a key of another type or curve (DSA, P-384, Ed448...).
    package init(pemRepresentation pem: [UInt8]) throws(KeyAuthError) {
        let key = try EVPKey.readPrivateKey(pem: pem)
        if key.isRSA {
            self = .rsa(try RSAPrivateKey(owning: key))
        } else if key.isCurve(.p256) {
            self = .p256(try P256PrivateKey(owning: key))
        } else if key.isCurve(.ed25519) {
            self = .ed25519(try Ed25519PrivateKey(owning: key))
        } else {
            throw KeyAuthError(.keyRejected, "the key must be RSA, EC P-256 or Ed25519")
        }
    }

    /// The matching public key.
    package var publicKey: JWSPublicKey {
        switch self {
        case .rsa(let key): .rsa(key.publicKey)
        case .p256(let key): .p256(key.publicKey)
        case .ed25519(let key): .ed25519(key.publicKey)
        }
    }

    /// The key as unencrypted PKCS#8 PEM.
    ///
    /// - Warning: secret; wipe the bytes when done.
    package func pkcs8PEM() throws(KeyAuthError) -> [UInt8] {
        switch self {
        case .rsa(let key): try key.pkcs8PEM()
        case .p256(let key): try key.pkcs8PEM()
        case .ed25519(let key): try key.pkcs8PEM()
        }
    }

    /// The key as the signer it is.
    package var signer: any JWSSigner {
        switch self {
        case .rsa(let key): key
        case .p256(let key): key
        case .ed25519(let key): key
        }
    }
}

extension JWSPrivateKey: JWSSigner {
    /// The key's algorithm.
    package var algorithm: JWSAlgorithm { publicKey.algorithm }

    /// The public key's thumbprint.
    package var keyID: String { publicKey.thumbprint }

    /// Signs with the key's algorithm.
    package func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try signer.signature(for: message)
    }
}
