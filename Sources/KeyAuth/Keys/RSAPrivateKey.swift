internal import CKeyAuthOpenSSL

/// An RSA private key: signs device assertions (and, on the server, access tokens).
///
/// Only signing lives here; verification needs only ``RSAPublicKey``, so code that verifies
/// never holds a private key.
public struct RSAPrivateKey: Sendable {
    let key: EVPKey
    /// The matching public key.
    public let publicKey: RSAPublicKey

    init(owning key: EVPKey) throws(KeyAuthError) {
        self.key = key
        self.publicKey = try RSAPublicKey(owning: key)
    }

    /// Generates a new key with public exponent 65537.
    ///
    /// - Parameter bits: 2048, 3072 (the default) or 4096.
    /// - Throws: `.invalidArgument` for other sizes; `.cryptoFailed` if OpenSSL fails.
    public static func generate(bits: Int = 3072) throws(KeyAuthError) -> RSAPrivateKey {
        guard [2048, 3072, 4096].contains(bits) else {
            throw KeyAuthError(.invalidArgument, "key size must be 2048, 3072 or 4096 bits, not \(bits)")
        }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, ckeyauth_name_RSA(), nil) else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate a key context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var pointer: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(bits)) == 1,
            EVP_PKEY_generate(context, &pointer) == 1, let pointer
        else { throw OpenSSL.error(.cryptoFailed, "RSA key generation failed") }
        return try RSAPrivateKey(owning: EVPKey(taking: pointer))
    }

    /// Reads an unencrypted private key PEM (PKCS#8 `PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`).
    ///
    /// - Throws: `.keyEncrypted` for an `ENCRYPTED PRIVATE KEY` (read it with
    ///   ``init(pemRepresentation:pin:)``), `.keyCorrupt` for anything that is not an RSA private
    ///   key.
    public init(pemRepresentation pem: [UInt8]) throws(KeyAuthError) {
        if Self.isEncryptedPEM(pem) {
            throw KeyAuthError(.keyEncrypted, "the key is encrypted and needs its PIN")
        }
        let key = try OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) in
            // A callback that refuses, so OpenSSL never falls back to prompting on the terminal.
            guard let pointer = PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil) else {
                throw OpenSSL.error(.keyCorrupt, "not a PEM RSA private key")
            }
            return EVPKey(taking: pointer)
        }
        try self.init(owning: key)
    }

    /// Reads a PKCS#8 `ENCRYPTED PRIVATE KEY` PEM with its PIN.
    ///
    /// Every PBES2 key derivation that OpenSSL knows is read: scrypt as written now, PBKDF2 as
    /// written before (``PINKeyEncryption/legacyPBKDF2``).
    /// - Throws: `.wrongPIN` when the PIN does not decrypt the key, `.keyCorrupt` when the file
    ///   is not an encrypted PKCS#8 structure at all, is encrypted in a scheme keyauth does not
    ///   write, or names a key derivation costlier than keyauth reads
    ///   (``PINKeyEncryption/isAffordable``), before any PIN is tried.
    public init(pemRepresentation pem: [UInt8], pin: SecretBytes) throws(KeyAuthError) {
        guard Self.isEncryptedPEM(pem) else {
            try self.init(pemRepresentation: pem)
            return
        }
        // The parameters are read before any PIN is tried: a scheme keyauth does not write
        // (another cipher or PRF) could name any cost, and OpenSSL would pay it.
        guard let encryption = Self.pinEncryption(ofPEM: pem) else {
            throw KeyAuthError(
                .keyCorrupt,
                "the key file is not encrypted in a way keyauth reads (PBES2, AES-256-CBC, scrypt or "
                    + "PBKDF2-HMAC-SHA256); it may be damaged")
        }
        guard encryption.isAffordable else {
            throw KeyAuthError(
                .keyCorrupt,
                "the key file is encrypted with \(encryption), beyond what keyauth reads; it may be damaged")
        }
        let encrypted: OpaquePointer = try OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) in
            guard let sig = PEM_read_bio_PKCS8(bio, nil, nil, nil) else {
                throw OpenSSL.error(.keyCorrupt, "not an encrypted PKCS#8 private key")
            }
            return sig
        }
        defer { X509_SIG_free(encrypted) }
        let info: OpaquePointer? = pin.withUnsafeBytes { buffer in
            buffer.withMemoryRebound(to: CChar.self) { PKCS8_decrypt(encrypted, $0.baseAddress, Int32($0.count)) }
        }
        guard let info else {
            OpenSSL.clearErrors()
            throw KeyAuthError(.wrongPIN, "wrong PIN")
        }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        guard let pointer = EVP_PKCS82PKEY(info) else {
            // A wrong PIN that happens to leave valid padding decodes to garbage.
            OpenSSL.clearErrors()
            throw KeyAuthError(.wrongPIN, "wrong PIN")
        }
        try self.init(owning: EVPKey(taking: pointer))
    }

    static func isEncryptedPEM(_ pem: [UInt8]) -> Bool {
        PEMText.contains(pem, "-----BEGIN ENCRYPTED PRIVATE KEY-----")
    }

    /// Signs `message` with RSASSA-PKCS1-v1_5 SHA-256 (RS256). Deterministic.
    public func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try SHA256Signatures.sign(key, message)
    }

    /// Signs `message` with RSASSA-PKCS1-v1_5 over SHA-256 or SHA-512: what an ssh-agent makes for
    /// `rsa-sha2-256` and `rsa-sha2-512` (ssh asks for SHA-512 by default).
    package func sshSignature(for message: [UInt8], digest: SSHAgentProtocol.Digest) throws(KeyAuthError) -> [UInt8] {
        switch digest {
        case .sha256: try signature(for: message)
        case .sha512: try key.digestSign(message, digest: OpenSSL.sha512)
        }
    }
}
