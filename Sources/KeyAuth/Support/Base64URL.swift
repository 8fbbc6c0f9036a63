/// Base64url without padding (RFC 4648 section 5, RFC 7515 section 2), strict on input.
///
/// JWS segments must be canonical: no padding, no whitespace, nothing outside the URL-safe
/// alphabet, and no non-zero trailing bits. Accepting variants would let two different strings
/// stand for the same token, which defeats replay caches keyed on the token text.
///
/// The coders are `@inlinable` so that callers in other modules get them specialized for their
/// collection type: unspecialized, every byte went through protocol witnesses, and decoding a
/// login's signature cost the server 3% of its CPU.
package enum Base64URL {
    @usableFromInline
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    @usableFromInline
    static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    /// Encodes bytes as base64url without padding.
    @inlinable
    package static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let alphabet = Self.alphabet
        var output = [UInt8]()
        output.reserveCapacity((bytes.count * 4 + 2) / 3)
        var iterator = bytes.makeIterator()
        while let first = iterator.next() {
            let second = iterator.next()
            let third = iterator.next()
            output.append(alphabet[Int(first >> 2)])
            output.append(alphabet[Int(((first & 0x03) << 4) | ((second ?? 0) >> 4))])
            if let second {
                output.append(alphabet[Int(((second & 0x0F) << 2) | ((third ?? 0) >> 6))])
            }
            if let third { output.append(alphabet[Int(third & 0x3F)]) }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes strict base64url; returns nil on padding, a foreign character, an impossible
    /// length, or non-zero unused bits.
    @inlinable
    package static func decode<Text: StringProtocol>(_ text: Text) -> [UInt8]? {
        decode(utf8: Array(text.utf8))
    }

    /// Decodes strict base64url from UTF-8 bytes.
    @inlinable
    package static func decode<Bytes: Collection>(utf8 input: Bytes) -> [UInt8]? where Bytes.Element == UInt8 {
        let count = input.count
        if count % 4 == 1 { return nil }
        let decodeTable = Self.decodeTable
        var output = [UInt8]()
        output.reserveCapacity(count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in input {
            let value = decodeTable[Int(byte)]
            if value == 0xFF { return nil }
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // Leftover bits must be zero, or two encodings would decode to the same bytes.
        if accumulator != 0 { return nil }
        return output
    }
}
