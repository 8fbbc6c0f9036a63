internal import CKeyAuthTSS2

extension ESAPIConnection {
    /// Loads a key blob under the parent OpenSSL's tpm2 provider made it under, hands the TPM
    /// stack the key's authorization value, runs `body` and flushes both objects.
    ///
    /// The ESAPI commands that the provider does not offer (`TPM2_Certify`,
    /// `TPM2_ObjectChangeAuth`) need the key loaded by hand; one place does it, so that every
    /// such command finds the key under the same parent as the provider's signatures do.
    ///
    /// - Parameters:
    ///   - blob: the key, from its `TSS2 PRIVATE KEY` file.
    ///   - authorization: the key's authorization value (its PIN); nil for an empty one. The TPM
    ///     checks it when `body` uses the key, not here.
    ///   - body: gets the loaded key's handle and its parent's.
    /// - Throws: `.keyCorrupt` for a blob whose parts do not unmarshal or that this TPM did not
    ///   make; `.tpmUnavailable`; `body`'s errors.
    func withLoadedKey<Result>(
        _ blob: TPMKeyBlob, authorization: SecretBytes?,
        _ body: (_ key: UInt32, _ parent: UInt32) throws(KeyAuthError) -> Result
    ) throws(KeyAuthError) -> Result {
        // The provider writes 0x40000001 (TPM_RH_OWNER) and reads 0 as the same; a persistent
        // parent would need its own handle, which keyauth never uses.
        guard blob.parent == Self.ownerParent || blob.parent == 0 else {
            let parent = "0x" + String(blob.parent, radix: 16, uppercase: true)
            throw KeyAuthError(
                .keyCorrupt,
                "the TPM key's parent is \(parent), not the owner's primary key that keyauth's keys live under")
        }
        let parent = try createPrimary(
            in: ESAPIConnection.ownerHierarchy, template: storageParentTemplate(), doing: "recreate the key's parent")
        defer { flush(parent.handle) }
        let key = try load(blob, under: parent.handle)
        defer { flush(key) }
        if let authorization {
            let set = Self.withAuthorizationValue(authorization) { value in Esys_TR_SetAuth(context, key, &value) }
            guard set == 0 else { throw Self.error(set, doing: "take the PIN", on: connection) }
        }
        return try body(key, parent.handle)
    }

    /// Lends `secret` to `body` as a `TPM2B_AUTH`, wiped afterwards.
    ///
    /// The TPM stack copies what it keeps (freed with the context); the copy on this stack frame
    /// is ours to wipe. The caller has checked the length (``TPMKey/maximumPINBytes``).
    static func withAuthorizationValue<Result>(
        _ secret: SecretBytes, _ body: (inout TPM2B_AUTH) -> Result
    ) -> Result {
        var value = TPM2B_AUTH()
        let size = min(secret.count, MemoryLayout.size(ofValue: value.buffer))
        secret.withUnsafeBytes { bytes in
            withUnsafeMutableBytes(of: &value.buffer) {
                $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[..<size]))
            }
        }
        value.size = UInt16(size)
        defer { withUnsafeMutableBytes(of: &value.buffer) { OpenSSL.cleanse($0) } }
        return body(&value)
    }

    /// `TPM_RH_OWNER` as a key file's parent: the primary storage key of the owner hierarchy.
    private static let ownerParent: UInt32 = 0x4000_0001

    func flush(_ handle: UInt32) {
        _ = Esys_FlushContext(context, handle)
    }

    private func load(_ blob: TPMKeyBlob, under parent: UInt32) throws(KeyAuthError) -> UInt32 {
        var publicPart = TPM2B_PUBLIC()
        var privatePart = TPM2B_PRIVATE()
        var publicOffset = 0
        var privateOffset = 0
        let decoded =
            blob.publicPart.withUnsafeBufferPointer {
                Tss2_MU_TPM2B_PUBLIC_Unmarshal($0.baseAddress, $0.count, &publicOffset, &publicPart)
            } == 0
            && blob.privatePart.withUnsafeBufferPointer {
                Tss2_MU_TPM2B_PRIVATE_Unmarshal($0.baseAddress, $0.count, &privateOffset, &privatePart)
            } == 0
        guard decoded else { throw KeyAuthError(.keyCorrupt, "not a TPM key: its public or private part is malformed") }
        var handle: UInt32 = 0
        let loaded = Esys_Load(
            context, parent, ESAPIConnection.passwordSession, ESAPIConnection.noSession, ESAPIConnection.noSession,
            &privatePart, &publicPart, &handle)
        guard loaded == 0 else { throw Self.error(loaded, doing: "load the key", on: connection) }
        return handle
    }

    /// The parent that OpenSSL's tpm2 provider creates for its keys (parent 0x40000001): the
    /// same template gives the same key, so the blob loads under it. An ECC NIST P-256 storage
    /// key where the TPM has ECC, RSA-2048 otherwise, as the provider chooses.
    private func storageParentTemplate() -> TPM2B_PUBLIC {
        var template = TPM2B_PUBLIC()
        template.publicArea.nameAlg = TPM2_ALG_SHA256
        template.publicArea.objectAttributes =
            TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT | TPMA_OBJECT_NODA
            | TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN
        if acceptsECCP256() {
            template.publicArea.type = TPM2_ALG_ECC
            template.publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES
            template.publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128
            template.publicArea.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB
            template.publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL
            template.publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256
            template.publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL
        } else {
            Self.makeRSAStorageKey(&template.publicArea)
        }
        return template
    }

    /// Whether the TPM has ECC with the NIST P-256 curve (`TPM2_TestParms`).
    private func acceptsECCP256() -> Bool {
        var parameters = TPMT_PUBLIC_PARMS()
        parameters.type = TPM2_ALG_ECC
        parameters.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_NULL
        parameters.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL
        parameters.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256
        parameters.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL
        return Esys_TestParms(
            context, ESAPIConnection.noSession, ESAPIConnection.noSession, ESAPIConnection.noSession, &parameters) == 0
    }
}
