/// A device key as a login uses it, wherever it is kept: something that signs, and the public
/// key the server registers.
///
/// ``KeyPairStore`` hands one out for a key file (an ``RSAPrivateKey`` in memory) and for a TPM
/// key (a ``TPMSigningKey``, whose signatures the TPM makes), so ``Authenticator`` and
/// ``JWTBuilder`` treat both alike.
///
/// ```swift
/// let key = try store.loadKey(pin: pin)           // a file key or a TPM key
/// let assertion = try JWTBuilder(key: key, audience: issuer).sign()
/// print(key.kind, key.publicKey.fingerprint)
/// ```
public struct DeviceKey: JWSSigner {
    /// What signs.
    public let signer: any JWSSigner
    /// The public key: what registration sends, and what every signature verifies with.
    public let publicKey: RSAPublicKey
    /// Where the private key lives.
    public let kind: KeyStore.Kind

    /// A key held in memory, read from a key file or just generated.
    public init(_ key: RSAPrivateKey) {
        signer = key
        publicKey = key.publicKey
        kind = .file
    }

    /// A key held by a TPM.
    public init(_ key: TPMSigningKey) {
        signer = key
        publicKey = key.publicKey
        kind = .tpm
    }

    /// A key whose signatures come from elsewhere (`keyauth agent`).
    package init(signer: any JWSSigner, publicKey: RSAPublicKey, kind: KeyStore.Kind) {
        self.signer = signer
        self.publicKey = publicKey
        self.kind = kind
    }

    /// The signer's algorithm (RS256 for both kinds).
    public var algorithm: JWSAlgorithm { signer.algorithm }

    /// The public key's fingerprint.
    public var keyID: String { signer.keyID }

    /// Signs through the key's owner: OpenSSL in memory, or the TPM.
    public func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try signer.signature(for: message)
    }
}
