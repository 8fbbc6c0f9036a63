import KeyAuth
import Testing

@Suite("Strict JSON")
struct JSONValueTests {
    @Test("integers and fractional numbers keep their type through a round trip")
    func numberRoundTrip() throws {
        for value: JSONValue in [.number(1.0), .number(-0.0), .number(1e16), .number(0.5), .integer(1), .integer(.max)]
        {
            let text = value.serialized()
            #expect(try JSONValue(parsing: text) == value, "\(text)")
        }
        #expect(JSONValue.number(1.0).serialized() == "1.0")
        #expect(try JSONValue(parsing: "1.0").integerValue == nil)
        #expect(try JSONValue(parsing: "1").integerValue == 1)
    }

    @Test("duplicate keys, trailing text, lone surrogates and deep nesting are refused")
    func strictness() {
        for text in ["{\"a\":1,\"a\":2}", "{} x", "\"\\ud800\"", "[01]", "{\"a\":1,}", "\"\u{01}\""] {
            #expect(throws: JSONValue.ParseError.self, "\(text)") { try JSONValue(parsing: text) }
        }
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        #expect(throws: JSONValue.ParseError.self) { try JSONValue(parsing: deep) }
    }

    @Test("strings escape control characters and quotes")
    func escaping() throws {
        let value: JSONValue = .string("a\"b\\c\n\u{01}é")
        #expect(value.serialized() == "\"a\\\"b\\\\c\\n\\u0001é\"")
        #expect(try JSONValue(parsing: value.serialized()) == value)
    }
}
