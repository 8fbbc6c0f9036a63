/// A `TPMS_ATTEST` (TPM 2.0 Part 2, section 10.12.12) of type certify: what `TPM2_Certify` signs.
package struct TPMAttestStatement: Sendable, Equatable {
    /// `TPM_GENERATED_VALUE`: only the TPM puts this in a structure it signs with a restricted
    /// key, so a digest handed to the TPM can never pass for a statement.
    package static let generatedValue: UInt32 = 0xFF54_4347
    /// `TPM_ST_ATTEST_CERTIFY`.
    package static let certifyType: UInt16 = 0x8017

    package let magic: UInt32
    package let type: UInt16
    /// The signing key's qualified name.
    package let qualifiedSigner: [UInt8]
    /// The qualifying data: the verifier's nonce.
    package let extraData: [UInt8]
    /// The certified key's name.
    package let certifiedName: [UInt8]

    /// Parses one certify statement.
    ///
    /// - Throws: `.malformed` when truncated or followed by bytes; `.notCertify` for another
    ///   magic or type (checked before the rest, whose layout depends on the type).
    package init(_ bytes: [UInt8]) throws(TPMAttestationError) {
        var reader = TPMStructureReader(bytes, structure: "the certify statement")
        magic = try reader.uint32()
        type = try reader.uint16()
        guard magic == Self.generatedValue else {
            throw TPMAttestationError(.notCertify, "the certify statement was not made by a TPM (wrong magic)")
        }
        guard type == Self.certifyType else {
            throw TPMAttestationError(.notCertify, "the statement is not a TPM2_Certify (wrong type)")
        }
        qualifiedSigner = try reader.sized(limit: 66)
        extraData = try reader.sized(limit: 64)
        _ = try reader.bytes(17)  // clockInfo: clock, resetCount, restartCount, safe
        _ = try reader.uint64()  // firmwareVersion
        certifiedName = try reader.sized(limit: 66)
        _ = try reader.sized(limit: 66)  // qualifiedName
        try reader.expectEnd()
    }
}
