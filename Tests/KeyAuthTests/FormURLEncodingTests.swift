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
}
