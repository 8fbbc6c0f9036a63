import KeyAuth
import Testing

@Suite("Form bodies")
struct FormURLEncodingTests {
    @Test("pairs are split at & and the first =, empty pairs skipped, components percent-decoded")
    func decoding() throws {
        let body = "grant_type=urn%3Aietf%3Aparams&&assertion=a.b.c&empty=&bare&x=1=2&sp=a+b%20c&"
        let values = try FormURLEncoding.decode(Array(body.utf8))
        #expect(
            values == [
                "grant_type": "urn:ietf:params", "assertion": "a.b.c", "empty": "", "bare": "", "x": "1=2",
                "sp": "a b c",
            ])
        #expect(try FormURLEncoding.decode([]) == [:])
        #expect(try FormURLEncoding.decode(Array("&&&".utf8)) == [:])
        #expect(try FormURLEncoding.decode(Array("=v".utf8)) == ["": "v"])
        #expect(try FormURLEncoding.decode(Array("n=%C3%A9".utf8)) == ["n": "é"])
    }

    @Test("a repeated name is noted, keeping the first value; bad encoding and invalid UTF-8 are refused")
    func refusals() throws {
        let (values, repeated) = try FormURLEncoding.decodeNotingRepeats(Array("a=1&b=2&a=3&b&c=4".utf8))
        #expect(values == ["a": "1", "b": "2", "c": "4"])
        #expect(repeated == ["a", "b"])
        #expect(throws: FormURLEncoding.DecodingError.self) { try FormURLEncoding.decode(Array("a=1&a=2".utf8)) }
        for body in ["a=%", "a=%4", "a=%GG", "a=%C3", "a=%FF"] {
            #expect(throws: FormURLEncoding.DecodingError.self, "\(body)") {
                try FormURLEncoding.decode(Array(body.utf8))
            }
        }
        // Raw bytes that are not UTF-8, with and without percent-encoding elsewhere in the value.
        #expect(throws: FormURLEncoding.DecodingError.self) { try FormURLEncoding.decode(Array("a=".utf8) + [0xC3]) }
        #expect(throws: FormURLEncoding.DecodingError.self) {
            try FormURLEncoding.decode(Array("a=%20".utf8) + [0xFF])
        }
    }

    @Test("a zero byte, escaped or raw, in a name or a value refuses the body")
    func zeroBytes() {
        let bodies: [[UInt8]] = [
            Array("a=x%00y".utf8), Array("a%00=1".utf8), Array("a=%00".utf8), Array("a=x".utf8) + [0] + Array("y".utf8),
            [0] + Array("=1".utf8),
        ]
        for body in bodies {
            do {
                _ = try FormURLEncoding.decode(body)
                Issue.record("accepted \(body)")
            } catch {
                #expect(error.message == "the form body holds a NUL character (%00)")
            }
        }
        #expect((try? FormURLEncoding.decode(Array("a=%30".utf8))) == ["a": "0"])
    }

    @Test("2,000 seeded random bodies decode as splitting at every & and the first = would decode them")
    func agreesWithSplitting() {
        // Pieces chosen to meet every branch: separators, escapes good and bad, ASCII, a whole
        // two-byte character, a byte that starts nothing; the bad ones rarer.
        let good = ["a", "b", "a", "b", "=", "=", "&", "&", "&", "+", "%20", "%C3%A9", "é", "xyz0123456789"]
        let bad: [[UInt8]] = [Array("%C3".utf8), Array("%4".utf8), Array("%".utf8), [0xFF]]
        let pieces = good.map { Array($0.utf8) } + bad
        var generator = SeededBytes(seed: 5)
        var decoded = 0
        var withRepeats = 0
        for round in 0..<2000 {
            let body = (0..<Int(generator.next() % 12)).flatMap { _ in pieces[Int(generator.next()) % pieces.count] }
            let expected = Self.splitting(body)
            let actual = try? FormURLEncoding.decodeNotingRepeats(body)
            #expect(actual?.values == expected?.values, "round \(round): \(body)")
            #expect(actual?.repeated == expected?.repeated, "round \(round): \(body)")
            if let expected {
                decoded += 1
                if !expected.repeated.isEmpty { withRepeats += 1 }
            }
        }
        // Enough bodies decode, repeats among them, for the comparison to mean something.
        #expect(decoded > 500)
        #expect(withRepeats > 5)
    }

    /// The rules written as plainly as possible: split, then decode each part on its own.
    private static func splitting(_ body: [UInt8]) -> (values: [String: String], repeated: Set<String>)? {
        var values: [String: String] = [:]
        var repeated: Set<String> = []
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = plainDecoding(parts[0]), let value = plainDecoding(parts.count > 1 ? parts[1] : [])
            else { return nil }
            if values[name] == nil { values[name] = value } else { repeated.insert(name) }
        }
        return (values, repeated)
    }

    private static func plainDecoding(_ component: ArraySlice<UInt8>) -> String? {
        var bytes: [UInt8] = []
        var rest = component[...]
        while let byte = rest.popFirst() {
            switch byte {
            case UInt8(ascii: "+"):
                bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard rest.count >= 2, let value = UInt8(String(decoding: rest.prefix(2), as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
                rest = rest.dropFirst(2)
            default:
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    @Test("text is ASCII-checked a word at a time: a high byte anywhere in 0 to 40 bytes takes the UTF-8 path")
    func asciiCheckEveryPosition() {
        for length in 0...40 {
            let ascii = [UInt8]((0..<length).map { UInt8(0x21 + $0 % 90) })
            #expect(UTF8Text.string(validating: ascii[...]) == String(decoding: ascii, as: UTF8.self))
            for position in 0..<length {
                var lone = ascii
                lone[position] = 0x80
                #expect(UTF8Text.string(validating: lone[...]) == nil, "length \(length), at \(position)")
                var accented = ascii
                accented.insert(contentsOf: Array("é".utf8), at: position)
                #expect(
                    UTF8Text.string(validating: accented[...]) == String(decoding: accented, as: UTF8.self),
                    "length \(length), at \(position)")
            }
        }
    }
}
