/// Writes the SSH wire encoding of RFC 4251 section 5: what OpenSSH's keys, certificates
/// (PROTOCOL.certkeys) and agent messages (draft-miller-ssh-agent) are made of.
///
/// Every length is a 32-bit big-endian count, so a field longer than 4 GiB cannot be written;
/// nothing keyauth writes comes near that, and such a field is refused rather than truncated.
package struct SSHWireWriter: Sendable {
    /// What has been written so far.
    package private(set) var bytes: [UInt8] = []

    package init() {}

    /// A `byte`.
    package mutating func byte(_ value: UInt8) {
        bytes.append(value)
    }

    /// A `uint32`.
    package mutating func uint32(_ value: UInt32) {
        bytes.append(contentsOf: [
            UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF),
        ])
    }

    /// A `uint64`.
    package mutating func uint64(_ value: UInt64) {
        uint32(UInt32(value >> 32))
        uint32(UInt32(value & 0xFFFF_FFFF))
    }

    /// A `string`: its length, then its bytes.
    ///
    /// - Throws: `.invalidArgument` for more than `UInt32.max` bytes.
    package mutating func string(_ value: [UInt8]) throws(KeyAuthError) {
        guard let length = UInt32(exactly: value.count) else {
            throw KeyAuthError(.invalidArgument, "an SSH string field cannot hold \(value.count) bytes")
        }
        uint32(length)
        bytes.append(contentsOf: value)
    }

    /// A `string` holding UTF-8 text.
    package mutating func string(_ value: String) throws(KeyAuthError) {
        try string(Array(value.utf8))
    }

    /// An `mpint` of a non-negative number given big-endian: leading zero bytes dropped, and one
    /// zero byte put back when the top bit is set, so that the number does not read as negative.
    package mutating func mpint(unsigned magnitude: [UInt8]) throws(KeyAuthError) {
        let significant = Array(magnitude.drop { $0 == 0 })
        if let first = significant.first, first & 0x80 != 0 {
            try string([0] + significant)
        } else {
            try string(significant)
        }
    }
}
