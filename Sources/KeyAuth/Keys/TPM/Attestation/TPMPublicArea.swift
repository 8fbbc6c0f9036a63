/// An RSA key's public area (`TPMT_PUBLIC`, TPM 2.0 Part 2, section 12.2.4) as a client sent it:
/// the bytes its TPM name is the digest of, and the fields a verifier checks.
///
/// Only RSA keys are read: keyauth's device keys, attestation keys and endorsement keys are all
/// RSA, and anything else is refused rather than half understood.
package struct TPMPublicArea: Sendable, Equatable {
    /// `TPMA_OBJECT` bits (Part 2, section 8.3).
    package struct Attributes: OptionSet, Sendable, Equatable {
        package let rawValue: UInt32
        package init(rawValue: UInt32) { self.rawValue = rawValue }

        package static let fixedTPM = Attributes(rawValue: 1 << 1)
        package static let fixedParent = Attributes(rawValue: 1 << 4)
        package static let sensitiveDataOrigin = Attributes(rawValue: 1 << 5)
        package static let restricted = Attributes(rawValue: 1 << 16)
        package static let decrypt = Attributes(rawValue: 1 << 17)
        package static let sign = Attributes(rawValue: 1 << 18)
    }

    /// The marshalled area, whose SHA-256 is the key's name.
    package let bytes: [UInt8]
    /// `nameAlg`.
    package let nameAlgorithm: UInt16
    package let attributes: Attributes
    /// The signing scheme (`TPM_ALG_RSASSA` ...) or `TPM_ALG_NULL`, and its hash.
    package let scheme: UInt16
    package let schemeHash: UInt16?
    /// The modulus, big-endian.
    package let modulus: [UInt8]
    /// The public exponent as the area stores it (0 means 65537).
    package let exponent: UInt32

    static let algorithmRSA: UInt16 = 0x0001
    static let algorithmSHA256: UInt16 = 0x000B
    static let algorithmNull: UInt16 = 0x0010
    static let algorithmRSASSA: UInt16 = 0x0014

    /// Parses `bytes`, which must be exactly one RSA `TPMT_PUBLIC`.
    ///
    /// - Parameter structure: names the area in errors.
    /// - Throws: `.malformed` for anything truncated, trailing, oversized or not RSA.
    package init(_ bytes: [UInt8], structure: String) throws(TPMAttestationError) {
        var reader = TPMStructureReader(bytes, structure: structure)
        guard try reader.uint16() == Self.algorithmRSA else {
            throw TPMAttestationError(.malformed, "\(structure) is not an RSA key's")
        }
        nameAlgorithm = try reader.uint16()
        attributes = Attributes(rawValue: try reader.uint32())
        _ = try reader.sized(limit: 64)  // authPolicy: at most a SHA-512 digest
        // TPMT_SYM_DEF_OBJECT: an algorithm, and for anything but NULL its key size and mode.
        if try reader.uint16() != Self.algorithmNull { _ = try reader.bytes(4) }
        scheme = try reader.uint16()
        // Every RSA scheme but RSAES and NULL carries a hash algorithm.
        schemeHash = scheme == Self.algorithmNull || scheme == 0x0015 ? nil : try reader.uint16()
        let keyBits = Int(try reader.uint16())
        exponent = try reader.uint32()
        modulus = try reader.sized(limit: 512)
        try reader.expectEnd()
        // A modulus of keyBits bits has its top bit set: one with leading zero bits is a smaller
        // key than the area states (found by fuzzing: Fuzz/binary-findings).
        guard modulus.count * 8 == keyBits, keyBits >= 2048, let top = modulus.first, top & 0x80 != 0 else {
            throw TPMAttestationError(.malformed, "\(structure) has a modulus that is not its stated size")
        }
        self.bytes = bytes
    }

    /// The TPM name: `0x000B` and the SHA-256 of the area.
    ///
    /// - Throws: `.malformed` for another name algorithm than SHA-256, which keyauth's TPM
    ///   templates all use.
    package func name() throws(TPMAttestationError) -> [UInt8] {
        guard nameAlgorithm == Self.algorithmSHA256, let digest = try? CryptoPrimitives.sha256(bytes) else {
            throw TPMAttestationError(.malformed, "a key's name algorithm is not SHA-256")
        }
        return [0x00, 0x0B] + digest
    }

    /// The RSA public key the area holds.
    ///
    /// - Throws: `.malformed` when OpenSSL refuses the numbers.
    package func publicKey() throws(TPMAttestationError) -> RSAPublicKey {
        let value = exponent == 0 ? 65537 : exponent
        let exponentBytes = (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * (3 - $0))) }.drop(while: { $0 == 0 })
        do {
            return try RSAPublicKey(modulus: modulus, exponent: Array(exponentBytes))
        } catch {
            throw TPMAttestationError(.malformed, "a public area holds no usable RSA key")
        }
    }
}
