internal import CKeyAuthTSS2

/// The TPM's signed statement that a device key lives in it: the result of `TPM2_Certify` of
/// the key by an attestation key of the same TPM.
///
/// The attestation key is a restricted signing key that the TPM derives from its endorsement
/// seed (a primary key of the endorsement hierarchy), so the same TPM always derives the same one,
/// and, being restricted, it signs only statements the TPM itself makes, never a digest handed
/// to it. The statement (`TPMS_ATTEST`) names the device key by its name (the SHA-256 of its
/// public area, which carries `fixedTPM` and `sensitiveDataOrigin`) and carries the verifier's
/// nonce. WebAuthn's `tpm` attestation format checks the same three things: `certInfo`,
/// `pubArea` and `sig`.
///
/// - Warning: the statement proves only that the key that signed it is a TPM's attestation key
///   if the verifier can tie that key to a genuine TPM: through the endorsement key's certificate
///   (``TPMConnection/endorsementCertificates()``) and credential activation
///   (`TPM2_ActivateCredential`). A certification alone is no evidence for a server; a
///   ``TPMAttestation`` carries all three, and the server checks them with
///   ``TPMAttestationVerifier`` and a ``TPMCredential`` challenge.
package struct TPMKeyCertification: Sendable, Hashable {
    /// The attestation key's public area (`TPMT_PUBLIC`, marshalled), whose name a credential
    /// activation would bind to the endorsement key.
    package let attestationKeyPublicArea: [UInt8]
    /// The attestation key's RSA-2048 public key, which verifies ``signature``.
    package let attestationKey: RSAPublicKey
    /// The statement the TPM signed (`TPMS_ATTEST`, marshalled, of type `TPM_ST_ATTEST_CERTIFY`).
    package let certifyInfo: [UInt8]
    /// RSASSA-PKCS1-v1_5 with SHA-256 over ``certifyInfo``.
    package let signature: [UInt8]

    /// The longest nonce the TPM takes (`TPM2B_DATA`): the size of a SHA-512 digest.
    package static let maximumNonceBytes = 64
}

extension TPMKey {
    /// Has the TPM certify that this key lives in it, with `nonce` in the statement.
    ///
    /// Loads the key from its blob, derives the attestation key, has the TPM sign the statement,
    /// and flushes both. `TPM2_Certify` needs the key's authorization like a signature does, so
    /// a key with a PIN needs it here, and a wrong PIN counts toward the TPM's lockout.
    ///
    /// - Parameters:
    ///   - nonce: the verifier's challenge, 1 to ``TPMKeyCertification/maximumNonceBytes`` bytes.
    ///   - pin: the key's authorization value; nil for a key without one.
    ///   - tpm: the TPM that made the key.
    /// - Throws: `.invalidArgument` for a nonce of the wrong size; otherwise what
    ///   ``signature(for:pin:on:)`` throws: `.wrongPIN`, `.lockedOut`, `.keyCorrupt` when this
    ///   TPM did not make the key, `.tpmUnavailable` naming the TCTI.
    package func certification(
        nonce: [UInt8], pin: SecretBytes? = nil, on tpm: TPMConnection
    ) throws(KeyAuthError) -> TPMKeyCertification {
        guard (1...TPMKeyCertification.maximumNonceBytes).contains(nonce.count) else {
            throw KeyAuthError(
                .invalidArgument, "a certification nonce must be 1 to \(TPMKeyCertification.maximumNonceBytes) bytes")
        }
        if requiresPIN {
            guard let pin else { throw KeyAuthError(.wrongPIN, "the TPM key needs its PIN") }
            guard pin.count <= Self.maximumPINBytes else { throw KeyAuthError(.wrongPIN, "wrong PIN") }
        }
        let blob = try TPMKeyBlob(pem: pemRepresentation)
        let authorization = requiresPIN ? pin : nil
        let result = Result { () throws(KeyAuthError) in
            try ESAPIConnection.with(tpm) { connection throws(KeyAuthError) in
                try connection.certify(blob, authorization: authorization, nonce: nonce)
            }
        }
        // The connection is closed here, so reading the lockout state can connect.
        switch result {
        case .success(let certification): return certification
        case .failure(let error): throw Self.explained(error, on: tpm)
        }
    }
}

extension ESAPIConnection {
    /// Loads `blob` under the owner's primary key, derives the attestation key, and certifies.
    fileprivate func certify(
        _ blob: TPMKeyBlob, authorization: SecretBytes?, nonce: [UInt8]
    ) throws(KeyAuthError) -> TPMKeyCertification {
        try withLoadedKey(blob, authorization: authorization) { key, _ throws(KeyAuthError) in
            try certify(key, nonce: nonce)
        }
    }

    /// Derives the attestation key and has it certify the loaded key `key`.
    private func certify(_ key: UInt32, nonce: [UInt8]) throws(KeyAuthError) -> TPMKeyCertification {
        let attestationKey = try createPrimary(
            in: ESAPIConnection.endorsementHierarchy, template: Self.attestationKeyTemplate,
            doing: "derive its attestation key")
        defer { flush(attestationKey.handle) }
        let (attestationKeyPublicArea, attestationRSAKey) = try attestationKeyParts(of: attestationKey.publicArea)

        var qualifyingData = TPM2B_DATA()
        // The nonce comes from a verifier: it must fit the structure before it is copied in.
        guard nonce.count <= MemoryLayout.size(ofValue: qualifyingData.buffer) else {
            throw KeyAuthError(
                .invalidArgument,
                "the attestation nonce is \(nonce.count) bytes; a TPM takes at most "
                    + "\(MemoryLayout.size(ofValue: qualifyingData.buffer))")
        }
        qualifyingData.size = UInt16(nonce.count)
        withUnsafeMutableBytes(of: &qualifyingData.buffer) { $0.copyBytes(from: nonce) }
        var scheme = TPMT_SIG_SCHEME()
        scheme.scheme = TPM2_ALG_NULL
        var attest: UnsafeMutablePointer<TPM2B_ATTEST>? = nil
        var signature: UnsafeMutablePointer<TPMT_SIGNATURE>? = nil
        let certified = Esys_Certify(
            context, key, attestationKey.handle, ESAPIConnection.passwordSession, ESAPIConnection.passwordSession,
            ESAPIConnection.noSession, &qualifyingData, &scheme, &attest, &signature)
        defer {
            Esys_Free(attest)
            Esys_Free(signature)
        }
        guard certified == 0, let attest, let signature, signature.pointee.sigAlg == TPM2_ALG_RSASSA else {
            throw Self.error(certified, doing: "certify the key", on: connection)
        }
        let attestSize = Int(attest.pointee.size)
        let rsassa = signature.pointee.signature.rsassa.sig
        return TPMKeyCertification(
            attestationKeyPublicArea: attestationKeyPublicArea, attestationKey: attestationRSAKey,
            certifyInfo: withUnsafeBytes(of: attest.pointee.attestationData) { Array($0.prefix(attestSize)) },
            signature: withUnsafeBytes(of: rsassa.buffer) { Array($0.prefix(Int(rsassa.size))) })
    }

    /// Has the TPM derive a primary key of `hierarchy` from `template`; the caller flushes it.
    func createPrimary(
        in hierarchy: UInt32, template: TPM2B_PUBLIC, doing operation: String
    ) throws(KeyAuthError) -> (handle: UInt32, publicArea: TPMT_PUBLIC) {
        var sensitive = TPM2B_SENSITIVE_CREATE()
        var template = template
        var outsideInfo = TPM2B_DATA()
        var creationPCR = TPML_PCR_SELECTION()
        var handle: UInt32 = 0
        var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>? = nil
        let created = Esys_CreatePrimary(
            context, hierarchy, ESAPIConnection.passwordSession, ESAPIConnection.noSession, ESAPIConnection.noSession,
            &sensitive, &template, &outsideInfo, &creationPCR, &handle, &outPublic, nil, nil, nil)
        defer { Esys_Free(outPublic) }
        guard created == 0, let outPublic else { throw Self.error(created, doing: operation, on: connection) }
        return (handle, outPublic.pointee.publicArea)
    }

    /// The attestation key's public area, marshalled, and its RSA public key.
    func attestationKeyParts(of area: TPMT_PUBLIC) throws(KeyAuthError) -> ([UInt8], RSAPublicKey) {
        var area = area
        var marshalled = [UInt8](repeating: 0, count: MemoryLayout<TPMT_PUBLIC>.size)
        var offset = 0
        let status = marshalled.withUnsafeMutableBufferPointer {
            Tss2_MU_TPMT_PUBLIC_Marshal(&area, $0.baseAddress, $0.count, &offset)
        }
        guard status == 0, let (modulus, exponent) = TPMKeyBlob.rsaNumbers(of: area),
            let key = try? RSAPublicKey(modulus: modulus, exponent: exponent)
        else { throw KeyAuthError(.keyCorrupt, "the TPM at \(connection.tcti) gave a malformed attestation key") }
        return (Array(marshalled.prefix(offset)), key)
    }

    /// Makes `area` an RSA-2048 restricted decryption key's parameters as storage keys and
    /// endorsement keys have them: AES-128 in CFB mode for its children, no signing scheme.
    static func makeRSAStorageKey(_ area: inout TPMT_PUBLIC) {
        area.type = TPM2_ALG_RSA
        area.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_AES
        area.parameters.rsaDetail.symmetric.keyBits.aes = 128
        area.parameters.rsaDetail.symmetric.mode.aes = TPM2_ALG_CFB
        area.parameters.rsaDetail.scheme.scheme = TPM2_ALG_NULL
        area.parameters.rsaDetail.keyBits = 2048
    }

    /// A restricted RSA-2048 signing key for RSASSA with SHA-256, bound to the TPM, with an empty
    /// authorization value and outside dictionary-attack protection (there is no secret to guess).
    static var attestationKeyTemplate: TPM2B_PUBLIC {
        var template = TPM2B_PUBLIC()
        template.publicArea.type = TPM2_ALG_RSA
        template.publicArea.nameAlg = TPM2_ALG_SHA256
        template.publicArea.objectAttributes =
            TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN
            | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA | TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_SIGN_ENCRYPT
        template.publicArea.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_NULL
        template.publicArea.parameters.rsaDetail.scheme.scheme = TPM2_ALG_RSASSA
        template.publicArea.parameters.rsaDetail.scheme.details.rsassa.hashAlg = TPM2_ALG_SHA256
        template.publicArea.parameters.rsaDetail.keyBits = 2048
        return template
    }

    /// `ESYS_TR_RH_OWNER`.
    static let ownerHierarchy: UInt32 = 0x101
    /// `ESYS_TR_RH_ENDORSEMENT`.
    static let endorsementHierarchy: UInt32 = 0x10B
}
