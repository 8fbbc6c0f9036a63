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
        var output: [UInt8] = []
        encode(bytes, appendingTo: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Appends the base64url text of `bytes` to `output`: a token is written into one buffer,
    /// its segments and dots, and becomes a string once.
    @inlinable
    package static func encode<Bytes: Collection>(_ bytes: Bytes, appendingTo output: inout [UInt8])
    where Bytes.Element == UInt8 {
        if bytes.withContiguousStorageIfAvailable({ encode(buffer: $0, appendingTo: &output) }) == nil {
            Array(bytes).withUnsafeBufferPointer { encode(buffer: $0, appendingTo: &output) }
        }
    }

    /// Three bytes at a time into four characters, then the one or two bytes left.
    @usableFromInline
    static func encode(buffer input: UnsafeBufferPointer<UInt8>, appendingTo output: inout [UInt8]) {
        let start = output.count
        let length = (input.count * 4 + 2) / 3
        output.append(contentsOf: repeatElement(0, count: length))
        output.withUnsafeMutableBufferPointer { whole in
            alphabet.withUnsafeBufferPointer { alphabet in
                var read = 0
                var written = start
                func put(_ sextet: UInt32) {
                    whole[written] = alphabet[Int(sextet & 0x3F)]
                    written += 1
                }
                while read + 3 <= input.count {
                    let group = UInt32(input[read]) << 16 | UInt32(input[read + 1]) << 8 | UInt32(input[read + 2])
                    put(group >> 18)
                    put(group >> 12)
                    put(group >> 6)
                    put(group)
                    read += 3
                }
                switch input.count - read {
                case 1:
                    let group = UInt32(input[read]) << 16
                    put(group >> 18)
                    put(group >> 12)
                case 2:
                    let group = UInt32(input[read]) << 16 | UInt32(input[read + 1]) << 8
                    put(group >> 18)
                    put(group >> 12)
                    put(group >> 6)
                default: break
                }
            }
        }
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
        if let decoded = input.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return decoded }
        return Array(input).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    /// Four characters at a time into three bytes, then the two or three characters left, whose
    /// unused bits must be zero.
    @usableFromInline
    static func decode(buffer input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = input.count
        if count % 4 == 1 { return nil }
        var isValid = true
        let decoded = decodeTable.withUnsafeBufferPointer { table in
            [UInt8](unsafeUninitializedCapacity: count * 3 / 4) { output, initialized in
                // A character outside the alphabet maps to 0xFF, whose top bits no sextet has.
                var invalid: UInt8 = 0
                var read = 0
                var written = 0
                while read + 4 <= count {
                    let first = table[Int(input[read])]
                    let second = table[Int(input[read + 1])]
                    let third = table[Int(input[read + 2])]
                    let fourth = table[Int(input[read + 3])]
                    invalid |= first | second | third | fourth
                    let group = UInt32(first) << 18 | UInt32(second) << 12 | UInt32(third) << 6 | UInt32(fourth)
                    output[written] = UInt8(truncatingIfNeeded: group >> 16)
                    output[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    output[written + 2] = UInt8(truncatingIfNeeded: group)
                    read += 4
                    written += 3
                }
                switch count - read {
                case 2:
                    let first = table[Int(input[read])]
                    let second = table[Int(input[read + 1])]
                    invalid |= first | second
                    // Leftover bits must be zero, or two encodings would decode to the same bytes.
                    if second & 0x0F != 0 { invalid |= 0xC0 }
                    output[written] = first << 2 | second >> 4
                    written += 1
                case 3:
                    let first = table[Int(input[read])]
                    let second = table[Int(input[read + 1])]
                    let third = table[Int(input[read + 2])]
                    invalid |= first | second | third
                    if third & 0x03 != 0 { invalid |= 0xC0 }
                    output[written] = first << 2 | second >> 4
                    output[written + 1] = second << 4 | third >> 2
                    written += 2
                default: break
                }
                isValid = invalid & 0xC0 == 0
                initialized = written
            }
        }
        return isValid ? decoded : nil
    }
}
