/// A device key's attestation as a client sends it at registration: evidence that the key lives
/// in a TPM, and which TPM.
///
/// The chain of evidence (the TCG's "TPM 2.0 Keys for Device Identity and Attestation", and
/// WebAuthn's `tpm` statement, check the same links):
/// 1. the endorsement key (EK) belongs to a genuine TPM: its certificate, signed by the
///    manufacturer, chains to a root the server trusts (``endorsementCertificates``); a TPM
///    without one sends the bare key (``endorsementKey``) and proves less;
/// 2. the attestation key (AK) lives in the same TPM as that EK: shown later by credential
///    activation (``TPMCredential``), which only that TPM can answer;
/// 3. the AK, a restricted signing key, certified the device key (``certifyInfo``,
///    ``signature``), with the server's nonce inside, so the statement is fresh;
/// 4. the certified name is the digest of ``keyPublicArea``, whose key is the one registered and
///    whose attributes bind it to the TPM.
package struct TPMAttestation: Sendable, Equatable {
    /// The EK's certificate and any intermediates, DER, the EK's first; empty when the TPM has
    /// none.
    package var endorsementCertificates: [[UInt8]]
    /// The EK itself, for a TPM without a certificate; when both are sent they must agree.
    package var endorsementKey: RSAPublicKey?
    /// The AK's `TPMT_PUBLIC`.
    package var attestationKeyPublicArea: [UInt8]
    /// The device key's `TPMT_PUBLIC`.
    package var keyPublicArea: [UInt8]
    /// The `TPMS_ATTEST` that `TPM2_Certify` made.
    package var certifyInfo: [UInt8]
    /// The AK's RSASSA-SHA256 signature over ``certifyInfo``.
    package var signature: [UInt8]

    package init(
        endorsementCertificates: [[UInt8]], endorsementKey: RSAPublicKey?, attestationKeyPublicArea: [UInt8],
        keyPublicArea: [UInt8], certifyInfo: [UInt8], signature: [UInt8]
    ) {
        self.endorsementCertificates = endorsementCertificates
        self.endorsementKey = endorsementKey
        self.attestationKeyPublicArea = attestationKeyPublicArea
        self.keyPublicArea = keyPublicArea
        self.certifyInfo = certifyInfo
        self.signature = signature
    }
}

/// What a verified attestation established, before credential activation.
package struct VerifiedTPMAttestation: Sendable, Equatable {
    /// The EK to encrypt the activation challenge to.
    package let endorsementKey: RSAPublicKey
    /// The AK's name, which the challenge is bound to.
    package let attestationKeyName: [UInt8]
    /// Nil when the EK's certificate chains to a trusted root; otherwise why not ("the TPM sent
    /// no endorsement key certificate", OpenSSL's reason): the difference between the tiers
    /// `attested` and `tpm-unverified`.
    package let endorsementProblem: String?
}

extension TPMKey {
    /// Gathers this key's attestation for a server's `nonce`: the RSA endorsement key's
    /// certificate when the TPM has one for the endorsement key derived here, that key, and a
    /// fresh `TPM2_Certify`.
    ///
    /// The endorsement key is derived with the TCG's default template. A TPM whose maker used
    /// a template of its own (NV indices 0x01C00003 and 0x01C00004) holds a certificate for
    /// another key, which a server refuses as not the EK's; without it, the key is attested
    /// with the tier `tpm-unverified` instead of not at all.
    ///
    /// - Parameters:
    ///   - nonce: the server's nonce, 1 to ``TPMKeyCertification/maximumNonceBytes`` bytes.
    ///   - pin: the key's PIN, which certifying needs like signing does.
    ///   - tpm: the TPM holding the key.
    /// - Throws: what ``certification(nonce:pin:on:)`` throws.
    package func attestation(
        nonce: [UInt8], pin: SecretBytes? = nil, on tpm: TPMConnection
    ) throws(KeyAuthError) -> TPMAttestation {
        // Only the RSA-2048 endorsement key's certificate: activation encrypts to that key.
        let endorsementKey = try tpm.endorsementKey()
        let certificates = try tpm.endorsementCertificates().filter {
            $0.nvIndex == 0x01C0_0002 && TPMEndorsementRoots.certifiedKey($0.der) == endorsementKey
        }.map(\.der)
        let certification = try certification(nonce: nonce, pin: pin, on: tpm)
        return TPMAttestation(
            endorsementCertificates: certificates, endorsementKey: endorsementKey,
            attestationKeyPublicArea: certification.attestationKeyPublicArea, keyPublicArea: tpmPublicArea,
            certifyInfo: certification.certifyInfo, signature: certification.signature)
    }
}
