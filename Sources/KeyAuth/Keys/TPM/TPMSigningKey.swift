/// A TPM key ready to sign JWTs: the blob, the TPM that holds it, and the PIN that authorizes it.
///
/// Every ``signature(for:)`` loads the key from the blob into the TPM, signs once, and flushes
/// it (``TPMKey/signature(for:pin:on:)``), so the private key never exists outside the TPM and a
/// key made a moment ago signs like any other. The TPM checks the PIN only when it signs: a wrong
/// one surfaces here, as `wrong_pin`, and counts toward the TPM's lockout.
///
/// The PIN is kept in a ``SecretBytes``, overwritten when the last copy of this key is released;
/// release the key when the login is done.
///
/// ```swift
/// let key = TPMSigningKey(key: try TPMKey(pemRepresentation: blob), pin: pin, on: tpm)
/// let assertion = try JWTBuilder(key: key, audience: issuer).sign()
/// ```
public struct TPMSigningKey: JWSSigner {
    /// The key's blob and public key.
    public let key: TPMKey
    /// The TPM that signs.
    public let connection: TPMConnection
    private let pin: SecretBytes?
    /// The public key's fingerprint, computed once.
    public let keyID: String

    /// - Parameters:
    ///   - key: the blob, read from disk.
    ///   - pin: the key's authorization value; nil for a key without one. Kept, not copied.
    ///   - connection: the TPM that made the key.
    public init(key: TPMKey, pin: SecretBytes?, on connection: TPMConnection) {
        self.key = key
        self.pin = pin
        self.connection = connection
        self.keyID = key.publicKey.fingerprint
    }

    /// RS256: the TPM signs PKCS#1 v1.5 over the SHA-256 digest.
    public var algorithm: JWSAlgorithm { .rs256 }

    /// The public key the server registers.
    public var publicKey: RSAPublicKey { key.publicKey }

    /// Signs `message` in the TPM, once.
    ///
    /// - Throws: `.wrongPIN` (saying how many wrong PINs the TPM still takes), `.lockedOut` with
    ///   the TPM's wait in ``KeyAuthError/retryAfter``, `.keyCorrupt` when this TPM did not make
    ///   the key, `.tpmUnavailable` naming the TCTI when no TPM answers.
    public func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try key.signature(for: message, pin: pin, on: connection)
    }

    /// Signs `message` in the TPM over SHA-256 or SHA-512, once: an ssh-agent's `rsa-sha2-256`
    /// or `rsa-sha2-512` signature (ssh asks for SHA-512 by default).
    ///
    /// - Throws: what ``signature(for:)`` throws.
    package func sshSignature(for message: [UInt8], digest: SSHAgentProtocol.Digest) throws(KeyAuthError) -> [UInt8] {
        try key.signature(for: message, digest: digest, pin: pin, on: connection)
    }

    /// Checks the PIN this key holds as a login would: one signature in the TPM, discarded
    /// (``TPMKey/checkPIN(_:on:)``). A wrong PIN counts once toward the TPM's lockout.
    ///
    /// - Throws: what ``signature(for:)`` throws.
    public func checkPIN() throws(KeyAuthError) {
        try key.checkPIN(pin, on: connection)
    }

    /// The key's attestation for a server's `nonce` (``TPMKey/attestation(nonce:pin:on:)``),
    /// authorized with the PIN this key holds.
    package func attestation(nonce: [UInt8]) throws(KeyAuthError) -> TPMAttestation {
        try key.attestation(nonce: nonce, pin: pin, on: connection)
    }

    /// The secret of a server's credential challenge, recovered by this key's TPM
    /// (``TPMConnection/activateCredential(_:encryptedSecret:)``).
    package func activateCredential(_ credential: TPMCredential) throws(KeyAuthError) -> [UInt8] {
        try connection.activateCredential(credential.credentialBlob, encryptedSecret: credential.encryptedSecret)
    }

    /// The key re-wrapped by the TPM under `newPIN`, authorized with the PIN this key holds
    /// (``TPMKey/changingPIN(from:to:on:)``).
    func changingPIN(to newPIN: SecretBytes) throws(KeyAuthError) -> TPMKey {
        try key.changingPIN(from: pin, to: newPIN, on: connection)
    }
}
