/// Checks a ``TPMAttestation`` as a server does, without a TPM: every link but credential
/// activation, which needs a round trip to the client's TPM.
///
/// Each check refuses with its own ``TPMAttestationError/Code``, in the order the links depend
/// on each other: the structures parse, the statement is a TPM's certify with this server's
/// nonce, it names the registered key with TPM-bound attributes, the AK is a restricted signing
/// key whose signature verifies, and the EK certificate (when sent) holds the EK used.
///
/// - Warning: a result without ``VerifiedTPMAttestation/endorsementProblem`` still proves
///   nothing until the client has answered the credential challenge made for
///   ``VerifiedTPMAttestation/endorsementKey`` and ``VerifiedTPMAttestation/attestationKeyName``:
///   before that, the AK could be a software key that signed a forged statement.
package struct TPMAttestationVerifier: Sendable {
    package let roots: TPMEndorsementRoots

    package init(roots: TPMEndorsementRoots) {
        self.roots = roots
    }

    /// Verifies `attestation` for the registration of `key` under the server's `nonce`.
    ///
    /// - Parameters:
    ///   - key: the public key being registered.
    ///   - nonce: the nonce the server issued for this registration.
    ///   - time: seconds since 1970, for the certificates' validity.
    /// - Throws: ``TPMAttestationError`` naming the failed check.
    package func verify(
        _ attestation: TPMAttestation, key: RSAPublicKey, nonce: [UInt8], at time: Int64
    ) throws(TPMAttestationError) -> VerifiedTPMAttestation {
        let statement = try TPMAttestStatement(attestation.certifyInfo)
        guard !nonce.isEmpty, CryptoPrimitives.constantTimeEquals(statement.extraData, nonce) else {
            throw TPMAttestationError(.wrongNonce, "the certify statement does not carry this server's nonce")
        }
        try checkDeviceKey(attestation.keyPublicArea, certifiedName: statement.certifiedName, key: key)
        let attestationKey = try TPMPublicArea(
            attestation.attestationKeyPublicArea, structure: "the attestation key's public area")
        let attestationKeyName = try checkAttestationKey(attestationKey, statement: statement)
        guard try attestationKey.publicKey().isValidSignature(attestation.signature, for: attestation.certifyInfo)
        else {
            throw TPMAttestationError(
                .badSignature, "the attestation key's signature over the statement does not verify")
        }
        let (endorsementKey, problem) = try endorsement(of: attestation, at: time)
        return VerifiedTPMAttestation(
            endorsementKey: endorsementKey, attestationKeyName: attestationKeyName, endorsementProblem: problem)
    }

    /// The certified key is the registered one, and the TPM holds it as a device key must be held.
    private func checkDeviceKey(_ bytes: [UInt8], certifiedName: [UInt8], key: RSAPublicKey)
        throws(TPMAttestationError)
    {
        let area = try TPMPublicArea(bytes, structure: "the device key's public area")
        guard CryptoPrimitives.constantTimeEquals(try area.name(), certifiedName) else {
            throw TPMAttestationError(.wrongKey, "the certified key is not the key in the attestation")
        }
        guard try area.publicKey() == key else {
            throw TPMAttestationError(.wrongKey, "the certified key is not the key being registered")
        }
        let bound: TPMPublicArea.Attributes = [.fixedTPM, .fixedParent, .sensitiveDataOrigin]
        guard area.attributes.isSuperset(of: bound) else {
            throw TPMAttestationError(
                .keyAttributes,
                "the device key can leave its TPM or was made outside it (fixedTPM, fixedParent, "
                    + "sensitiveDataOrigin)")
        }
        // A restricted key signs only the TPM's own statements, and a restricted decryption key
        // is a storage key: neither is a device key that signs logins.
        guard area.attributes.contains(.sign), !area.attributes.contains(.restricted) else {
            throw TPMAttestationError(.keyAttributes, "the device key is not an unrestricted signing key")
        }
        // A device registered before keys were screened: its TPM's residence proves nothing when
        // anyone can compute the private key.
        guard !key.hasROCAFingerprint else {
            throw TPMAttestationError(
                .keyAttributes, "the device key has the ROCA fingerprint (CVE-2017-15361): make a new key")
        }
    }

    /// The AK is a restricted RSASSA-SHA256 signing key bound to the TPM, a primary key of the
    /// endorsement hierarchy, and the statement's signer.
    private func checkAttestationKey(
        _ area: TPMPublicArea, statement: TPMAttestStatement
    ) throws(TPMAttestationError) -> [UInt8] {
        let required: TPMPublicArea.Attributes = [
            .fixedTPM, .fixedParent, .sensitiveDataOrigin, .restricted, .sign,
        ]
        guard area.attributes.isSuperset(of: required), !area.attributes.contains(.decrypt) else {
            throw TPMAttestationError(
                .attestationKeyAttributes, "the attestation key is not a restricted signing key bound to its TPM")
        }
        guard area.scheme == TPMPublicArea.algorithmRSASSA, area.schemeHash == TPMPublicArea.algorithmSHA256 else {
            throw TPMAttestationError(.attestationKeyAttributes, "the attestation key does not sign with RSASSA-SHA256")
        }
        // With the exponent 1 a "signature" is the padded digest itself, and a ROCA key's private
        // half can be computed: either would make the signature check below prove nothing.
        let key = try area.publicKey()
        do {
            try key.checkPolicy(allowedBits: 2048...4096)
        } catch {
            throw TPMAttestationError(
                .attestationKeyAttributes,
                "the attestation key is not an RSA key of 2048 to 4096 bits with the exponent 65537 and without the "
                    + "ROCA fingerprint (CVE-2017-15361)")
        }
        let name = try area.name()
        // A primary key's qualified name: the digest of its hierarchy's handle
        // (TPM_RH_ENDORSEMENT) and its name (TPM 2.0 Part 1, section 16).
        guard let digest = try? CryptoPrimitives.sha256([0x40, 0x00, 0x00, 0x0B] + name),
            statement.qualifiedSigner == [0x00, 0x0B] + digest
        else {
            throw TPMAttestationError(
                .attestationKeyAttributes,
                "the statement was not signed by this attestation key of the endorsement "
                    + "hierarchy")
        }
        return name
    }

    /// The EK to challenge, and why its certificate does not make it a genuine TPM's, if so.
    private func endorsement(
        of attestation: TPMAttestation, at time: Int64
    ) throws(TPMAttestationError) -> (RSAPublicKey, String?) {
        guard !attestation.endorsementCertificates.isEmpty else {
            guard let key = attestation.endorsementKey else {
                throw TPMAttestationError(.endorsementKey, "the attestation has no endorsement key or certificate")
            }
            try Self.checkSize(of: key)
            return (key, "the TPM sent no endorsement key certificate")
        }
        let (key, problem) = try roots.verify(chain: attestation.endorsementCertificates, at: time)
        if let sent = attestation.endorsementKey, sent != key {
            throw TPMAttestationError(.endorsementKey, "the endorsement key is not the one its certificate names")
        }
        try Self.checkSize(of: key)
        return (key, problem.map { "the endorsement key certificate does not verify: \($0)" })
    }

    /// Credential activation encrypts to the EK with RSA-OAEP; TPM EKs are RSA-2048 with the
    /// exponent 65537 (the TCG templates' default), and an RSA modulus is odd. OpenSSL decodes a
    /// key that breaks these without a word and fails only when it encrypts, which would have
    /// been the server's failure instead of a refusal of the request.
    private static func checkSize(of key: RSAPublicKey) throws(TPMAttestationError) {
        guard key.bits == 2048 else {
            throw TPMAttestationError(.endorsementKey, "the endorsement key is not an RSA-2048 key")
        }
        guard key.exponent == [0x01, 0x00, 0x01], let last = key.modulus.last, last & 1 == 1 else {
            throw TPMAttestationError(
                .endorsementKey, "the endorsement key is not an RSA key a TPM makes (exponent 65537, odd modulus)")
        }
        // A factory EK of Infineon's firmware before 2017: whoever factors it (once, for good)
        // can answer every credential challenge to it, from software, behind a genuine certificate.
        guard !key.hasROCAFingerprint else {
            throw TPMAttestationError(
                .endorsementKey,
                "the endorsement key has the ROCA fingerprint (CVE-2017-15361): its TPM needs a firmware update")
        }
    }
}
