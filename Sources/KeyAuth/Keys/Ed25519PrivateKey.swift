/// An Ed25519 private key: signs EdDSA (RFC 8037). Signatures are deterministic.
package struct Ed25519PrivateKey: Sendable {
    let key: EVPKey
    /// The matching public key.
    package let publicKey: Ed25519PublicKey

    init(owning key: EVPKey) throws(KeyAuthError) {
        self.key = key
        publicKey = try Ed25519PublicKey(owning: key)
    }

    /// Generates a new key.
    ///
    /// - Throws: `.cryptoFailed` if OpenSSL fails.
    package static func generate() throws(KeyAuthError) -> Ed25519PrivateKey {
        try Ed25519PrivateKey(owning: EVPKey.generate(.ed25519))
    }

    /// Reads an unencrypted PKCS#8 private key PEM.
    ///
    /// - Throws: `.keyEncrypted` for an encrypted PEM; `.keyCorrupt` for anything that is not a
    ///   private key; `.keyRejected` for a key of another type.
    package init(pemRepresentation pem: [UInt8]) throws(KeyAuthError) {
        try self.init(owning: EVPKey.readPrivateKey(pem: pem))
    }

    /// The key as unencrypted PKCS#8 PEM.
    ///
    /// - Warning: secret; wipe the bytes when done.
    package func pkcs8PEM() throws(KeyAuthError) -> [UInt8] {
        try key.unencryptedPKCS8PEM()
    }

    /// Signs `message` with Ed25519 and returns the 64-byte signature.
    package func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try key.digestSign(message, digest: nil)
    }
}

extension Ed25519PrivateKey: JWSSigner {
    /// Always EdDSA.
    package var algorithm: JWSAlgorithm { .edDSA }

    /// The public key's thumbprint.
    package var keyID: String { publicKey.thumbprint }
}
