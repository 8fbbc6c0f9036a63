/// Hexadecimal digits, read in one place: percent-encoding, JSON `\u` escapes, database hex.
package enum Hex {
    /// The value of one hexadecimal digit (either case), or nil for any other byte.
    package static func value(ofDigit byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The bytes of an even number of hexadecimal digits, or nil for anything else.
    package static func decode<Digits: Collection>(_ digits: Digits) -> [UInt8]? where Digits.Element == UInt8 {
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var iterator = digits.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let high = value(ofDigit: high), let low = value(ofDigit: low) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    /// Hexadecimal of `bytes`, two digits each, lower case unless `uppercase`.
    package static func encode<Bytes: Sequence>(_ bytes: Bytes, uppercase: Bool = false) -> String
    where Bytes.Element == UInt8 {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var output: [UInt8] = []
        for byte in bytes {
            output.append(digits[Int(byte >> 4)])
            output.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: output, as: UTF8.self)
    }
}
