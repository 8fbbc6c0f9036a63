/// A device key held by a TPM: an RSA key that the TPM generated and never lets out.
///
/// What exists outside the TPM is a `TSS2 PRIVATE KEY` blob: the public key, and the private key
/// encrypted by a key that only this TPM can derive (a primary key of its owner hierarchy). The
/// blob is useless on any other TPM, or on this one after it is cleared, and it does not hold
/// the private key in any form a program could use. Every signature is made inside the TPM.
///
/// The PIN, when there is one, is the key's authorization value. The TPM checks it, counts wrong
/// ones toward its dictionary-attack lockout, and refuses all keyauth keys while locked out
/// (``TPMInfo``). Without a PIN the key has an empty authorization value and whatever runs as the
/// user can sign with it while it can reach the TPM; it still cannot take the key elsewhere.
///
/// Keys are loaded into the TPM only for the length of one operation and flushed after it, so a
/// TPM never fills up with keyauth keys, and deleting the blob is all it takes to delete a key.
///
/// ```swift
/// let tpm = try TPMConnection.fromEnvironment()
/// let pin = SecretBytes(utf8: "2468")
/// let key = try TPMKey.generate(pin: pin, on: tpm)
/// try Data(key.pemRepresentation).write(to: blobURL)   // only the blob is stored (0600)
/// let signature = try key.signature(for: message, pin: pin, on: tpm)
/// assert(key.publicKey.isValidSignature(signature, for: message))
/// ```
public struct TPMKey: Sendable {
    /// The `TSS2 PRIVATE KEY` PEM: what a key store writes to disk.
    public let pemRepresentation: [UInt8]
    /// The public key, read from the blob without a TPM.
    public let publicKey: RSAPublicKey
    /// Whether signing needs the PIN (the key's authorization value is not empty).
    public let requiresPIN: Bool
    /// Whether the TPM marks the key as bound to itself (`fixedTPM`, `fixedParent`), generated
    /// inside it (`sensitiveDataOrigin`), and subject to its dictionary-attack lockout (no `noDA`).
    public let isBoundToTPM: Bool

    /// The key's TPM name: the name algorithm (SHA-256, `0x000B`) followed by the SHA-256 of its
    /// public area. A ``TPMKeyCertification`` names the key it certifies by this value.
    package let tpmName: [UInt8]
    /// The key's public area (`TPMT_PUBLIC`), which ``tpmName`` is the digest of: what a verifier
    /// checks the key's attributes in.
    package let tpmPublicArea: [UInt8]

    /// The longest PIN a TPM key takes, in bytes: an authorization value may not be longer than
    /// the digest of the key's name algorithm, SHA-256.
    public static let maximumPINBytes = 32

    /// The RSA sizes ``generate(bits:pin:on:)`` accepts; which of them a TPM supports is in
    /// ``TPMInfo/rsaKeySizes``.
    public static let allowedBits = [2048, 3072, 4096]

    /// Reads a blob, without a TPM.
    ///
    /// - Throws: `.keyCorrupt` for anything that is not an RSA `TSS2 PRIVATE KEY` PEM.
    public init(pemRepresentation pem: [UInt8]) throws(KeyAuthError) {
        let blob = try TPMKeyBlob(pem: pem)
        pemRepresentation = pem
        publicKey = try RSAPublicKey(modulus: blob.modulus, exponent: blob.exponent)
        requiresPIN = !blob.hasEmptyAuthorization
        isBoundToTPM = blob.isFixedToTPM && blob.wasGeneratedInTPM && blob.isProtectedFromDictionaryAttacks
        // The stored TPM2B_PUBLIC is a 2-byte size, then the public area the name is computed over.
        tpmPublicArea = Array(blob.publicPart.dropFirst(2))
        tpmName = [0x00, 0x0B] + (try CryptoPrimitives.sha256(tpmPublicArea))
    }

    /// Has the TPM generate a new key.
    ///
    /// - Parameters:
    ///   - bits: 2048, 3072 or 4096; by default 3072 when the TPM supports it, else 2048.
    ///   - pin: the key's authorization value, 1 to ``maximumPINBytes`` bytes; nil for none.
    ///     The caller keeps and wipes it. OpenSSL's copies are wiped when it frees them; the TPM
    ///     stack's copy is freed with the connection, before this call returns.
    ///   - tpm: the TPM.
    /// - Throws: `.invalidArgument` for a size or PIN outside the limits or a size the TPM does
    ///   not support, `.tpmUnavailable` when the TPM does not answer.
    public static func generate(
        bits: Int? = nil, pin: SecretBytes? = nil, on tpm: TPMConnection
    ) throws(KeyAuthError) -> TPMKey {
        if let pin { try checkLength(of: pin) }
        // Asked before the provider connects: a software TPM serves one connection at a time.
        let size: Int
        if let bits { size = bits } else { size = try tpm.info().preferredRSAKeySize }
        guard allowedBits.contains(size) else {
            throw KeyAuthError(.invalidArgument, "TPM key size must be 2048, 3072 or 4096 bits, not \(size)")
        }
        let pem = try TPMLoadedKey(generatingIn: TPMProvider(connection: tpm), bits: size, pin: pin)
            .pemRepresentation()
        return try TPMKey(pemRepresentation: pem)
    }

    /// Signs `message` with RSASSA-PKCS1-v1_5 SHA-256 (RS256) inside the TPM.
    ///
    /// One TPM signature per call: the key is loaded from the blob, signs the SHA-256 digest
    /// (computed here, not by the TPM), and is flushed. The signature is checked against
    /// ``publicKey`` before it is returned.
    ///
    /// - Throws: `.wrongPIN` when the TPM refused the PIN (the message says how many attempts
    ///   the TPM still allows) or no PIN was given for a key that needs one; `.lockedOut` with
    ///   ``KeyAuthError/retryAfter`` when the TPM is in dictionary-attack lockout; `.keyCorrupt`
    ///   when this TPM did not make the key; `.tpmUnavailable` when no TPM answers.
    public func signature(
        for message: [UInt8], pin: SecretBytes? = nil, on tpm: TPMConnection
    ) throws(KeyAuthError) -> [UInt8] {
        try signature(for: message, digest: .sha256, pin: pin, on: tpm)
    }

    /// Signs `message` with RSASSA-PKCS1-v1_5 over SHA-256 or SHA-512 inside the TPM: what
    /// `keyauth agent` makes for ssh's `rsa-sha2-256` and `rsa-sha2-512` requests.
    ///
    /// - Throws: what ``signature(for:pin:on:)`` throws.
    package func signature(
        for message: [UInt8], digest: SSHAgentProtocol.Digest, pin: SecretBytes?, on tpm: TPMConnection
    ) throws(KeyAuthError) -> [UInt8] {
        let result = Result { () throws(KeyAuthError) in
            try loadForSigning(pin: pin, on: tpm).signature(for: message, digest: digest)
        }
        // The key and its connection are gone here, so reading the lockout state can connect.
        switch result {
        case .success(let signature): return signature
        case .failure(let error): throw Self.explained(error, on: tpm)
        }
    }

    /// Loads the key into the TPM for signing, keeping the connection open until the result is
    /// released: for benchmarks that separate loading from signing. Logins use
    /// ``signature(for:pin:on:)``.
    package func loadForSigning(pin: SecretBytes?, on tpm: TPMConnection) throws(KeyAuthError) -> TPMLoadedKey {
        if requiresPIN {
            guard let pin else { throw KeyAuthError(.wrongPIN, "the TPM key needs its PIN") }
            // Longer than any authorization value: wrong without asking the TPM.
            guard pin.count <= Self.maximumPINBytes else { throw KeyAuthError(.wrongPIN, "wrong PIN") }
        }
        return try TPMLoadedKey(
            decoding: pemRepresentation, pin: requiresPIN ? pin : nil, publicKey: publicKey,
            in: TPMProvider(connection: tpm))
    }

    static func checkLength(of pin: SecretBytes) throws(KeyAuthError) {
        guard (1...maximumPINBytes).contains(pin.count) else {
            throw KeyAuthError(.invalidArgument, "a TPM key's PIN must be 1 to \(maximumPINBytes) bytes long")
        }
    }

    /// Adds what the TPM says about its lockout to a wrong-PIN or locked-out error.
    static func explained(_ error: KeyAuthError, on tpm: TPMConnection) -> KeyAuthError {
        // Only the TPM's own refusals carry a response code; a missing PIN never reached it.
        guard error.code == .wrongPIN || error.code == .lockedOut, error.underlying is NativeError,
            let info = try? tpm.info()
        else { return error }
        let wait =
            info.lockoutInterval > 0
            ? "for up to \(info.lockoutInterval) seconds"
            : "until its owner resets the lockout (tpm2_dictionarylockout --clear-lockout)"
        let retryAfter = info.lockoutInterval > 0 ? info.lockoutInterval : nil
        if error.code == .wrongPIN {
            guard info.isLockedOut || info.attemptsLeft == 0 else {
                let attempts = info.attemptsLeft == 1 ? "1 more wrong PIN" : "\(info.attemptsLeft) more wrong PINs"
                return KeyAuthError(
                    .wrongPIN, "wrong PIN; the TPM locks out after \(attempts)", underlying: error.underlying)
            }
            // A lockout that only its owner lifts has no wait to state: it is a lockout, not a
            // wrong PIN to ask again after.
            return KeyAuthError(
                retryAfter == nil ? .lockedOut : .wrongPIN,
                "wrong PIN; the TPM is now locked and refuses its keys \(wait)",
                underlying: error.underlying,
                retryAfter: retryAfter)
        }
        return KeyAuthError(
            .lockedOut, "the TPM is locked after too many wrong PINs and refuses its keys \(wait)",
            underlying: error.underlying, retryAfter: retryAfter)
    }
}
