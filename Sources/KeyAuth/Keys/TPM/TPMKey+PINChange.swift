internal import CKeyAuthTSS2

extension TPMKey {
    /// What ``checkPIN(_:on:)`` has the TPM sign: no JWS signing input (it has no `.` and is not
    /// base64url JSON), so the signature could never pass for an assertion or a proof.
    static let pinCheckMessage = Array("keyauth: TPM key PIN check".utf8)

    /// Checks that `pin` is the key's authorization value the way a login does: the TPM makes one
    /// signature with it, which is discarded.
    ///
    /// A wrong PIN costs what it costs at a login: one count toward the TPM's dictionary-attack
    /// lockout, no more. A right one costs nothing.
    ///
    /// - Throws: what ``signature(for:pin:on:)`` throws: `.wrongPIN` saying how many wrong PINs
    ///   the TPM still takes, `.lockedOut`, `.keyCorrupt`, `.tpmUnavailable`.
    public func checkPIN(_ pin: SecretBytes?, on tpm: TPMConnection) throws(KeyAuthError) {
        _ = try signature(for: Self.pinCheckMessage, pin: pin, on: tpm)
    }

    /// The same key under a new PIN: the TPM re-wraps the private key with a new authorization
    /// value (`TPM2_ObjectChangeAuth`), so nothing needs registering again.
    ///
    /// The public part, and with it the public key, the key ID and the TPM name, stays as it was;
    /// only the `TSS2 PRIVATE KEY`'s private part changes, and every other field of the file keeps
    /// its bytes, so OpenSSL's tpm2 provider opens the new blob as it opened the old one. Before
    /// it is returned the new blob signs once through that provider with `new`, the path a login
    /// takes: the caller is about to let it replace the only copy of the key.
    ///
    /// - Parameters:
    ///   - current: the key's authorization value now; the TPM checks it (`TPM2_ObjectChangeAuth`
    ///     is authorized with it), and a wrong one counts once toward its lockout, as at a login.
    ///     Nil (or longer than ``maximumPINBytes``) is wrong without asking the TPM.
    ///   - new: the new authorization value, 1 to ``maximumPINBytes`` bytes.
    ///   - tpm: the TPM that made the key.
    /// - Returns: the key with its new blob, for the caller to store atomically.
    /// - Throws: `.invalidArgument` for a key made without a PIN (its empty authorization value is
    ///   part of how its account checks presence) or a new PIN outside the limits; `.wrongPIN`,
    ///   `.lockedOut`, `.keyCorrupt` when this TPM did not make the key, `.tpmUnavailable` naming
    ///   the TCTI; `.cryptoFailed` when the new blob does not sign with the new PIN.
    /// - Warning: the old blob stays valid with the old PIN: the TPM keeps no record of a key, so
    ///   it cannot revoke a copy of the old file. Someone who copied `device-key.tpm` and knows
    ///   the old PIN can still sign on this TPM; to shut them out, reset and register again.
    public func changingPIN(
        from current: SecretBytes?, to new: SecretBytes, on tpm: TPMConnection
    ) throws(KeyAuthError) -> TPMKey {
        guard requiresPIN else {
            throw KeyAuthError(.invalidArgument, "the TPM key was made without a PIN, and keeps none to change")
        }
        try Self.checkLength(of: new)
        guard let current else { throw KeyAuthError(.wrongPIN, "the TPM key needs its PIN") }
        // Longer than any authorization value: wrong without asking the TPM.
        guard current.count <= Self.maximumPINBytes else { throw KeyAuthError(.wrongPIN, "wrong PIN") }
        let blob = try TPMKeyBlob(pem: pemRepresentation)
        let result = Result { () throws(KeyAuthError) in
            try ESAPIConnection.with(tpm) { connection throws(KeyAuthError) in
                try connection.withLoadedKey(blob, authorization: current) { key, parent throws(KeyAuthError) in
                    try connection.changeAuthorization(of: key, under: parent, to: new)
                }
            }
        }
        // The connection is closed here, so reading the lockout state can connect.
        let privatePart: [UInt8]
        switch result {
        case .success(let changed): privatePart = changed
        case .failure(let error): throw Self.explained(error, on: tpm)
        }
        let changed = try TPMKey(pemRepresentation: blob.replacingPrivatePart(with: privatePart))
        guard changed.publicKey == publicKey, changed.tpmName == tpmName, changed.requiresPIN else {
            throw KeyAuthError(.cryptoFailed, "the TPM at \(tpm.tcti) changed more than the key's PIN")
        }
        do {
            try changed.checkPIN(new, on: tpm)
        } catch {
            guard error.code != .tpmUnavailable else { throw error }
            throw KeyAuthError(
                .cryptoFailed, "the TPM key does not sign under its new PIN: \(error.message)", underlying: error)
        }
        return changed
    }
}

extension ESAPIConnection {
    /// `TPM2_ObjectChangeAuth` on the loaded `key`: its private part re-wrapped by `parent` with
    /// `secret` as the new authorization value, marshalled as a `TPM2B_PRIVATE`.
    ///
    /// The command needs the key's admin role, which a key without `adminWithPolicy` (every key
    /// tpm2-openssl makes) grants to its authorization value, set by ``withLoadedKey(_:authorization:_:)``.
    fileprivate func changeAuthorization(
        of key: UInt32, under parent: UInt32, to secret: SecretBytes
    ) throws(KeyAuthError) -> [UInt8] {
        var outPrivate: UnsafeMutablePointer<TPM2B_PRIVATE>? = nil
        let changed = Self.withAuthorizationValue(secret) { value in
            Esys_ObjectChangeAuth(
                context, key, parent, Self.passwordSession, Self.noSession, Self.noSession, &value, &outPrivate)
        }
        defer { Esys_Free(outPrivate) }
        guard changed == 0, let outPrivate else {
            throw Self.error(changed, doing: "change the key's PIN", on: connection)
        }
        var marshalled = [UInt8](repeating: 0, count: MemoryLayout<TPM2B_PRIVATE>.size)
        var offset = 0
        let status = marshalled.withUnsafeMutableBufferPointer {
            Tss2_MU_TPM2B_PRIVATE_Marshal(outPrivate, $0.baseAddress, $0.count, &offset)
        }
        guard status == 0 else {
            throw KeyAuthError(.cryptoFailed, "the TPM at \(connection.tcti) gave a private part that does not marshal")
        }
        return Array(marshalled.prefix(offset))
    }
}
