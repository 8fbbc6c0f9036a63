/// Reads the SSH wire encoding of RFC 4251 section 5 from bytes another process sent (an
/// ssh-agent request): every length is compared with what is left before anything is read, so
/// hostile input ends in nil, never in a trap or a read past the end.
package struct SSHWireReader: Sendable {
    private let bytes: [UInt8]
    private var offset = 0

    package init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Whether every byte has been read: a message with bytes left over is malformed.
    package var isAtEnd: Bool { offset == bytes.count }

    /// A `byte`, or nil when none is left.
    package mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// A `uint32`, or nil when fewer than four bytes are left.
    package mutating func uint32() -> UInt32? {
        guard bytes.count - offset >= 4 else { return nil }
        defer { offset += 4 }
        return bytes[offset..<offset + 4].reduce(0) { ($0 << 8) | UInt32($1) }
    }

    /// A `uint64`, or nil when fewer than eight bytes are left.
    package mutating func uint64() -> UInt64? {
        guard let high = uint32(), let low = uint32() else { return nil }
        return UInt64(high) << 32 | UInt64(low)
    }

    /// A `string`, or nil when its length runs past the end.
    package mutating func string() -> [UInt8]? {
        let start = offset
        guard let length = uint32() else { return nil }
        // Compared before it is added: the length is the sender's word.
        guard UInt64(length) <= UInt64(bytes.count - offset) else {
            offset = start
            return nil
        }
        defer { offset += Int(length) }
        return Array(bytes[offset..<offset + Int(length)])
    }
}
