/// The TPM kind of ``KeyPairStore``: a key the TPM generates and wraps, of which the store keeps
/// only the `TSS2 PRIVATE KEY` blob, and the TPM's own change of its authorization value when
/// the PIN changes.
extension KeyPairStore {
    /// Has `tpm` generate a key and stores its blob.
    func createTPMKey(bits: Int?, pin: SecretBytes?, on tpm: TPMConnection) throws(KeyAuthError)
        -> TPMSigningKey
    {
        if let pin { try TPMKey.checkLength(of: pin) }
        // Read before the key is made: a software TPM serves one connection at a time.
        let info = try tpm.infoForNewKeys()
        let size = bits ?? info.preferredRSAKeySize
        guard info.rsaKeySizes.contains(size) else {
            let sizes = info.rsaKeySizes.map(String.init).joined(separator: " or ")
            throw KeyAuthError(
                .invalidArgument,
                "the TPM at \(tpm.tcti) (\(info.manufacturer)) makes RSA keys of \(sizes) bits, not \(size)")
        }
        let key = try TPMKey.generate(bits: size, pin: pin, on: tpm)
        guard key.isBoundToTPM else {
            throw KeyAuthError(.cryptoFailed, "the TPM at \(tpm.tcti) made a key that it would let leave it")
        }
        // Nothing is stored: the server would refuse the key, and rightly.
        guard !key.publicKey.hasROCAFingerprint else {
            throw KeyAuthError(
                .keyRejected,
                "the TPM at \(tpm.tcti) (\(info.manufacturer)) made a key whose private key can be computed from its "
                    + "public key (ROCA, CVE-2017-15361): update the TPM's firmware, or use a key file (--key-store file)"
            )
        }
        try store(key)
        return TPMSigningKey(key: key, pin: pin, on: tpm)
    }

    /// Stores a TPM key's blob (one made by ``TPMKey/generate(bits:pin:on:)``).
    ///
    /// - Throws: `.keyExists` when a key is already stored.
    public func store(_ key: TPMKey) throws(KeyAuthError) {
        try storeNew(publicKey: key.publicKey, privatePart: key.pemRepresentation, at: tpmKeyPath)
    }

    /// Reads the TPM key's blob, for signing with `pin` on ``keyStore``'s TPM.
    ///
    /// - Throws: `.keyNotFound`, `.keyUnprotected` (file mode, owner, symlink), `.keyCorrupt`
    ///   (not a TPM key blob, or not matching the stored public key). Nothing here asks the TPM.
    public func loadTPMKey(pin: SecretBytes? = nil) throws(KeyAuthError) -> TPMSigningKey {
        let blob = try SecureFile.readProtected(tpmKeyPath)
        let key: TPMKey
        do {
            key = try TPMKey(pemRepresentation: blob)
        } catch {
            throw KeyAuthError(.keyCorrupt, "\(tpmKeyPath) is corrupt: \(error.message)", underlying: error)
        }
        if let stored = try? loadPublicKey(), stored != key.publicKey {
            throw KeyAuthError(.keyCorrupt, "\(tpmKeyPath) does not match \(publicKeyPath)")
        }
        return TPMSigningKey(key: key, pin: pin, on: keyStore.tpmConnection ?? .kernelResourceManager)
    }

    /// Gives the stored TPM key a new authorization value, in place of the PIN `key` holds.
    ///
    /// No file can be re-encrypted here: the TPM checks a TPM key's PIN, so the TPM itself
    /// re-wraps the private key under the new one (``TPMKey/changingPIN(from:to:on:)``,
    /// `TPM2_ObjectChangeAuth`) and the new blob replaces the old one. The current PIN is checked
    /// by the TPM as it authorizes that change: a wrong one fails as at a login (`.wrongPIN`,
    /// counted once toward the TPM's lockout) and writes nothing. The new blob has signed with
    /// the new PIN before it is written, atomically (0600, `fsync`, `rename`, `fsync` of the
    /// directory), and only while the file still holds the blob `key` was read from: a process
    /// killed at any point leaves the old blob or the new one, each opening with its own PIN. The
    /// public key file does not change.
    ///
    /// - Parameters:
    ///   - key: the stored key, from ``loadTPMKey(pin:)`` with the current PIN, on the TPM that
    ///     made it. Callers that ask a person check the PIN first (``TPMSigningKey/checkPIN()``
    ///     through ``PINPresence``), so that a typo is asked again before the new PIN is.
    ///   - pin: the new PIN, 1 to ``TPMKey/maximumPINBytes`` bytes; at least
    ///     ``minimumTPMPINLength`` characters is the caller's check.
    /// - Throws: `.invalidArgument` when the store holds a key file, for a key made without a PIN,
    ///   or for a new PIN outside the limits; `.wrongPIN`, `.lockedOut`, `.tpmUnavailable`;
    ///   `.keyCorrupt` when the stored blob is no longer `key`'s (another PIN change, or a reset
    ///   and a new registration, meanwhile); `.storageFailed`.
    /// - Warning: a copy of the old blob still opens with the old PIN (see
    ///   ``TPMKey/changingPIN(from:to:on:)``).
    public func replacePIN(of key: TPMSigningKey, with pin: SecretBytes) throws(KeyAuthError) {
        guard storedKind == .tpm else {
            throw KeyAuthError(.invalidArgument, "the device key in \(directory) is a key file, not a TPM key")
        }
        let changed = try key.changingPIN(to: pin)
        let written = try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) -> Bool in
            guard try SecureFile.readProtected(tpmKeyPath) == key.key.pemRepresentation else { return false }
            try SecureFile.write(changed.pemRepresentation, to: tpmKeyPath)
            return true
        }
        guard written else {
            throw KeyAuthError(.keyCorrupt, "the device key in \(directory) changed while its PIN was being changed")
        }
    }
}
