/// The key-file kind of ``KeyPairStore``: a PKCS#8 PEM file, encrypted with the PIN when there
/// is one, and everything that reads or rewrites it (decrypting, checking it against the public
/// key, re-encrypting older PBKDF2 files with scrypt, and changing its PIN).
extension KeyPairStore {
    /// Stores an existing key pair (generated elsewhere, or imported) as a key file.
    ///
    /// - Throws: `.keyExists` when a key is already stored.
    public func store(_ key: RSAPrivateKey, pin: SecretBytes? = nil) throws(KeyAuthError) {
        var privatePEM = try key.pkcs8PEM(pin: pin)
        defer { CryptoPrimitives.wipe(&privatePEM) }
        try storeNew(publicKey: key.publicKey, privatePart: privatePEM, at: privateKeyPath)
    }

    /// Whether the stored key file is encrypted with a PIN (key files only).
    public func isEncrypted() throws(KeyAuthError) -> Bool {
        var pem = try SecureFile.readProtected(privateKeyPath)
        defer { CryptoPrimitives.wipe(&pem) }
        return RSAPrivateKey.isEncryptedPEM(pem)
    }

    /// Loads the private key, decrypting it with `pin` when it is encrypted.
    ///
    /// A key file encrypted otherwise than with ``PINKeyEncryption/standard`` (PBKDF2, as
    /// keyauth wrote before scrypt) is re-encrypted with it once the PIN has proved right, so
    /// that an older file does not stay cheaper to guess offline. That rewrite is atomic, checked
    /// by decrypting the new file before it replaces the old one, and best effort: when it fails
    /// (a full disk) the old file stays and the next login tries again.
    ///
    /// - Throws: `.keyNotFound`, `.keyUnprotected` (file mode, owner, symlink), `.keyCorrupt`
    ///   (truncated or not a key, or not matching the stored public key), `.wrongPIN`;
    ///   `.invalidArgument` when the stored key is a TPM key, whose private half no file holds.
    public func loadPrivateKey(pin: SecretBytes? = nil) throws(KeyAuthError) -> RSAPrivateKey {
        guard storedKind != .tpm else {
            throw KeyAuthError(
                .invalidArgument, "the device key in \(directory) is held by a TPM: open it with loadKey")
        }
        var pem = try SecureFile.readProtected(privateKeyPath)
        defer { CryptoPrimitives.wipe(&pem) }
        let key = try decode(pem, pin: pin)
        if let pin, RSAPrivateKey.isEncryptedPEM(pem), RSAPrivateKey.pinEncryption(ofPEM: pem) != .standard {
            try? reencrypt(key, pin: pin, replacing: pem)
        }
        return key
    }

    /// Parses (and decrypts) a private key PEM and checks it against the stored public key.
    private func decode(_ pem: [UInt8], pin: SecretBytes?) throws(KeyAuthError) -> RSAPrivateKey {
        guard !pem.isEmpty else { throw KeyAuthError(.keyCorrupt, "\(privateKeyPath) is empty") }
        let key: RSAPrivateKey
        do throws(KeyAuthError) {
            if let pin {
                key = try RSAPrivateKey(pemRepresentation: pem, pin: pin)
            } else {
                key = try RSAPrivateKey(pemRepresentation: pem)
            }
        } catch {
            guard error.code == .keyCorrupt || error.code == .keyRejected else { throw error }
            throw KeyAuthError(.keyCorrupt, "\(privateKeyPath) is corrupt: \(error.message)", underlying: error)
        }
        if let stored = try? loadPublicKey(), stored != key.publicKey {
            throw KeyAuthError(.keyCorrupt, "\(privateKeyPath) does not match \(publicKeyPath)")
        }
        return key
    }

    /// Writes `key` encrypted with ``PINKeyEncryption/standard`` over the file that held `old`.
    ///
    /// Under the store's lock, and only if the file still holds `old`: another process may have
    /// re-encrypted it meanwhile, or a reset and a new registration may have replaced the key.
    private func reencrypt(_ key: RSAPrivateKey, pin: SecretBytes, replacing old: [UInt8]) throws(KeyAuthError) {
        _ = try writeEncrypted(key, pin: pin) { current in current == old }
    }

    /// Encrypts the key file's key under a new PIN, in place of the current one.
    ///
    /// The caller opens the key with the current PIN first (through ``PINPresence``, so that
    /// wrong PINs count). The new file is written atomically and checked by decrypting it before
    /// it replaces the old one: a crash leaves one of the two files, each opening with its PIN.
    /// - Parameters:
    ///   - key: the stored key, opened with the current PIN.
    ///   - pin: the new PIN; at least ``minimumPINLength`` characters is the caller's check.
    /// - Throws: `.invalidArgument` when the store holds a TPM key
    ///   (``replacePIN(of:with:)-(TPMSigningKey,_)`` changes that); `.keyNotFound`; `.keyCorrupt`
    ///   when the stored key is no longer `key` (a reset and a new registration meanwhile);
    ///   `.storageFailed`.
    public func replacePIN(of key: RSAPrivateKey, with pin: SecretBytes) throws(KeyAuthError) {
        guard storedKind != .tpm else {
            throw KeyAuthError(.invalidArgument, "the device key in \(directory) is held by a TPM")
        }
        let written = try writeEncrypted(key, pin: pin) { (_) throws(KeyAuthError) in
            try loadPublicKey() == key.publicKey
        }
        guard written else {
            throw KeyAuthError(.keyCorrupt, "the device key in \(directory) changed while its PIN was being changed")
        }
    }

    /// Writes `key` encrypted under `pin` with ``PINKeyEncryption/standard`` over the key file,
    /// under the store's lock and only when `isStillCurrent` accepts the file's present bytes.
    ///
    /// - Returns: whether the file was written.
    private func writeEncrypted(
        _ key: RSAPrivateKey, pin: SecretBytes, when isStillCurrent: ([UInt8]) throws(KeyAuthError) -> Bool
    ) throws(KeyAuthError) -> Bool {
        var fresh = try key.pkcs8PEM(pin: pin, encryption: .standard)
        defer { CryptoPrimitives.wipe(&fresh) }
        // Never replace a key that opens with one that might not: losing it means registering again.
        guard try RSAPrivateKey(pemRepresentation: fresh, pin: pin).publicKey == key.publicKey else {
            throw KeyAuthError(.cryptoFailed, "the re-encrypted key does not decrypt to the same key")
        }
        return try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) -> Bool in
            var current = try SecureFile.readProtected(privateKeyPath)
            defer { CryptoPrimitives.wipe(&current) }
            guard try isStillCurrent(current) else { return false }
            try SecureFile.write(fresh, to: privateKeyPath)
            return true
        }
    }
}
