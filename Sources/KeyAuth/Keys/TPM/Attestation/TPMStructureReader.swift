/// Reads TPM 2.0 structures as they travel (big-endian, sizes before contents) from bytes a
/// client sent, without the TPM stack: the server has no TPM, and every length is checked
/// against what is left before anything is read, so no input can make it read past the end or
/// trap.
struct TPMStructureReader {
    private var remaining: ArraySlice<UInt8>
    /// Names the structure in errors ("the attestation key's public area").
    let structure: String

    init(_ bytes: [UInt8], structure: String) {
        remaining = bytes[...]
        self.structure = structure
    }

    /// Whether every byte was read.
    var isAtEnd: Bool { remaining.isEmpty }

    mutating func bytes(_ count: Int) throws(TPMAttestationError) -> [UInt8] {
        guard count >= 0, remaining.count >= count else {
            throw TPMAttestationError(.malformed, "\(structure) is truncated")
        }
        defer { remaining = remaining.dropFirst(count) }
        return Array(remaining.prefix(count))
    }

    mutating func uint8() throws(TPMAttestationError) -> UInt8 { UInt8(try number(1)) }
    mutating func uint16() throws(TPMAttestationError) -> UInt16 { UInt16(try number(2)) }
    mutating func uint32() throws(TPMAttestationError) -> UInt32 { UInt32(try number(4)) }
    mutating func uint64() throws(TPMAttestationError) -> UInt64 { try number(8) }

    /// A `TPM2B_*`: a 2-byte size, then that many bytes, at most `limit`.
    mutating func sized(limit: Int) throws(TPMAttestationError) -> [UInt8] {
        let count = Int(try uint16())
        guard count <= limit else {
            throw TPMAttestationError(.malformed, "\(structure) has a field of \(count) bytes, over \(limit)")
        }
        return try bytes(count)
    }

    /// Refuses bytes after the structure: a signature over more than the parsed statement would
    /// let unparsed bytes ride along.
    func expectEnd() throws(TPMAttestationError) {
        guard isAtEnd else { throw TPMAttestationError(.malformed, "\(structure) has trailing bytes") }
    }

    private mutating func number(_ count: Int) throws(TPMAttestationError) -> UInt64 {
        try bytes(count).reduce(0) { $0 << 8 | UInt64($1) }
    }
}
