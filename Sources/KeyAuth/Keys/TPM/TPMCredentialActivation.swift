internal import CKeyAuthTSS2

extension TPMKeyCertification {
    /// The attestation key's TPM name (SHA-256, `0x000B`, then the SHA-256 of its public area):
    /// what a verifier binds a credential to with `TPM2_MakeCredential`.
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL cannot digest.
    package var attestationKeyName: [UInt8] {
        get throws(KeyAuthError) { [0x00, 0x0B] + (try CryptoPrimitives.sha256(attestationKeyPublicArea)) }
    }
}

extension TPMConnection {
    /// The TPM's RSA-2048 endorsement key, derived with the TCG's default template (EK Credential
    /// Profile, template L-1): the key that the certificate at NV index 0x01C00002 certifies.
    ///
    /// - Throws: `.tpmUnavailable` naming the TCTI when no TPM answers.
    package func endorsementKey() throws(KeyAuthError) -> RSAPublicKey {
        try ESAPIConnection.with(self) { tpm throws(KeyAuthError) in
            let key = try tpm.createPrimary(
                in: ESAPIConnection.endorsementHierarchy, template: ESAPIConnection.endorsementKeyTemplate,
                doing: "derive its endorsement key")
            defer { tpm.flush(key.handle) }
            guard let (modulus, exponent) = TPMKeyBlob.rsaNumbers(of: key.publicArea),
                let publicKey = try? RSAPublicKey(modulus: modulus, exponent: exponent)
            else { throw KeyAuthError(.keyCorrupt, "the TPM at \(tcti) gave a malformed endorsement key") }
            return publicKey
        }
    }

    /// Recovers a credential that a verifier encrypted for this TPM's attestation key
    /// (`TPM2_ActivateCredential`).
    ///
    /// The verifier makes the credential with `TPM2_MakeCredential` (in software, from public
    /// values only): a secret encrypted to the endorsement key that its certificate names, which
    /// the TPM releases only when the key named in the credential, the attestation key of
    /// ``TPMKeyCertification/attestationKeyName``, is loaded beside that endorsement key in the
    /// same TPM. Giving the secret back proves to the verifier that the attestation key, and so
    /// every statement it signed, belongs to the TPM of the certificate.
    ///
    /// - Parameters:
    ///   - credentialBlob: the contents of the `TPM2B_ID_OBJECT` (without its size).
    ///   - encryptedSecret: the contents of the `TPM2B_ENCRYPTED_SECRET` (without its size).
    /// - Returns: the credential, at most 64 bytes.
    /// - Throws: `.invalidArgument` when the blobs are too large; `.keyCorrupt` when the TPM
    ///   refuses them (made for another TPM or another attestation key, or altered);
    ///   `.tpmUnavailable` naming the TCTI when no TPM answers.
    package func activateCredential(_ credentialBlob: [UInt8], encryptedSecret: [UInt8]) throws(KeyAuthError) -> [UInt8]
    {
        var blob = TPM2B_ID_OBJECT()
        var secret = TPM2B_ENCRYPTED_SECRET()
        guard credentialBlob.count <= MemoryLayout.size(ofValue: blob.credential),
            encryptedSecret.count <= MemoryLayout.size(ofValue: secret.secret)
        else { throw KeyAuthError(.invalidArgument, "the credential or its secret is too large for a TPM") }
        blob.size = UInt16(credentialBlob.count)
        withUnsafeMutableBytes(of: &blob.credential) { $0.copyBytes(from: credentialBlob) }
        secret.size = UInt16(encryptedSecret.count)
        withUnsafeMutableBytes(of: &secret.secret) { $0.copyBytes(from: encryptedSecret) }
        return try ESAPIConnection.with(self) { tpm throws(KeyAuthError) in
            try tpm.activate(&blob, &secret)
        }
    }
}

extension ESAPIConnection {
    fileprivate func activate(
        _ blob: inout TPM2B_ID_OBJECT, _ secret: inout TPM2B_ENCRYPTED_SECRET
    ) throws(KeyAuthError) -> [UInt8] {
        let endorsementKey = try createPrimary(
            in: Self.endorsementHierarchy, template: Self.endorsementKeyTemplate, doing: "derive its endorsement key")
        defer { flush(endorsementKey.handle) }
        let attestationKey = try createPrimary(
            in: Self.endorsementHierarchy, template: Self.attestationKeyTemplate, doing: "derive its attestation key")
        defer { flush(attestationKey.handle) }
        let session = try endorsementPolicySession()
        defer { flush(session) }
        var credential: UnsafeMutablePointer<TPM2B_DIGEST>? = nil
        let activated = Esys_ActivateCredential(
            context, attestationKey.handle, endorsementKey.handle, Self.passwordSession, session, Self.noSession, &blob,
            &secret, &credential)
        defer { Esys_Free(credential) }
        guard activated == 0, let credential else {
            let failure = Self.error(activated, doing: "activate the credential", on: connection)
            // Any refusal of the blobs themselves: they were not made for this TPM and key.
            guard failure.code != .tpmUnavailable else { throw failure }
            throw KeyAuthError(
                .keyCorrupt, "the TPM at \(connection.tcti) refused the credential: it was not made for this TPM",
                underlying: failure)
        }
        let size = Int(credential.pointee.size)
        return withUnsafeBytes(of: credential.pointee.buffer) { Array($0.prefix(size)) }
    }

    /// A policy session satisfying the endorsement key's policy, `TPM2_PolicySecret` with the
    /// endorsement hierarchy's (empty) authorization; the caller flushes it.
    private func endorsementPolicySession() throws(KeyAuthError) -> UInt32 {
        var symmetric = TPMT_SYM_DEF()
        symmetric.algorithm = TPM2_ALG_NULL
        var session: UInt32 = 0
        let started = Esys_StartAuthSession(
            context, Self.noSession, Self.noSession, Self.noSession, Self.noSession, Self.noSession, nil,
            TPM2_SE_POLICY, &symmetric, TPM2_ALG_SHA256, &session)
        guard started == 0 else { throw Self.error(started, doing: "start a policy session", on: connection) }
        let satisfied = Esys_PolicySecret(
            context, Self.endorsementHierarchy, session, Self.passwordSession, Self.noSession, Self.noSession, nil,
            nil, nil, 0, nil, nil)
        guard satisfied == 0 else {
            flush(session)
            throw Self.error(satisfied, doing: "satisfy the endorsement key's policy", on: connection)
        }
        return session
    }

    /// The TCG's default RSA-2048 endorsement key template (EK Credential Profile for TPM 2.0,
    /// template L-1): a restricted decryption key usable only through its policy (PolicySecret
    /// of the endorsement hierarchy), with a 256-byte zero `unique` field.
    static var endorsementKeyTemplate: TPM2B_PUBLIC {
        var template = TPM2B_PUBLIC()
        makeRSAStorageKey(&template.publicArea)
        template.publicArea.nameAlg = TPM2_ALG_SHA256
        template.publicArea.objectAttributes =
            TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN
            | TPMA_OBJECT_ADMINWITHPOLICY | TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT
        template.publicArea.authPolicy.size = UInt16(endorsementPolicy.count)
        withUnsafeMutableBytes(of: &template.publicArea.authPolicy.buffer) { $0.copyBytes(from: endorsementPolicy) }
        template.publicArea.unique.rsa.size = 256
        return template
    }

    /// The policy digest of `TPM2_PolicySecret(TPM_RH_ENDORSEMENT)` with SHA-256 (the profile's
    /// "policy A").
    private static let endorsementPolicy: [UInt8] = [
        0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xB3, 0xF8, 0x1A, 0x90, 0xCC, 0x8D, 0x46, 0xA5, 0xD7, 0x24,
        0xFD, 0x52, 0xD7, 0x6E, 0x06, 0x52, 0x0B, 0x64, 0xF2, 0xA1, 0xDA, 0x1B, 0x33, 0x14, 0x69, 0xAA,
    ]
}
