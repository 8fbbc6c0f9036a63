/// An EC private key on P-256: signs ES256, the fast choice for a server's access tokens.
///
/// ECDSA signatures are randomized, so two signatures of one message differ; both verify.
package struct P256PrivateKey: Sendable {
    let key: EVPKey
    /// The matching public key.
    package let publicKey: P256PublicKey

    init(owning key: EVPKey) throws(KeyAuthError) {
        self.key = key
        publicKey = try P256PublicKey(owning: key)
    }

    /// Generates a new key.
    ///
    /// - Throws: `.cryptoFailed` if OpenSSL fails.
    package static func generate() throws(KeyAuthError) -> P256PrivateKey {
        try P256PrivateKey(owning: EVPKey.generate(.p256))
    }

    /// Reads an unencrypted private key PEM (PKCS#8 `PRIVATE KEY`, or SEC 1 `EC PRIVATE KEY`).
    ///
    /// - Throws: `.keyEncrypted` for an encrypted PEM; `.keyCorrupt` for anything that is not a
    ///   private key; `.keyRejected` for a key of another type or curve.
    package init(pemRepresentation pem: [UInt8]) throws(KeyAuthError) {
        try self.init(owning: EVPKey.readPrivateKey(pem: pem))
    }

    /// The key as unencrypted PKCS#8 PEM.
    ///
    /// - Warning: secret; wipe the bytes when done.
    package func pkcs8PEM() throws(KeyAuthError) -> [UInt8] {
        try key.unencryptedPKCS8PEM()
    }

    /// Signs `message` with ECDSA P-256 SHA-256 and returns the 64-byte `r || s` of a JWS.
    package func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try ECDSASignatureEncoding.raw(fromDER: SHA256Signatures.sign(key, message))
    }
}

extension P256PrivateKey: JWSSigner {
    /// Always ES256.
    package var algorithm: JWSAlgorithm { .es256 }

    /// The public key's thumbprint.
    package var keyID: String { publicKey.thumbprint }
}
