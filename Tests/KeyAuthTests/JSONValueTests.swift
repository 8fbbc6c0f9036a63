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

    @Test("integers at the 64-bit limits stay integers; beyond them they are numbers")
    func integerLimits() throws {
        #expect(try JSONValue(parsing: "9223372036854775807") == .integer(.max))
        #expect(try JSONValue(parsing: "-9223372036854775808") == .integer(.min))
        #expect(try JSONValue(parsing: "-0") == .integer(0))
        #expect(
            try JSONValue(parsing: "[0,-1,1800000000]") == .array([.integer(0), .integer(-1), .integer(1_800_000_000)]))
        #expect(try JSONValue(parsing: "9223372036854775808") == .number(9_223_372_036_854_775_808))
        #expect(try JSONValue(parsing: "-9223372036854775809") == .number(-9_223_372_036_854_775_809))
        #expect(try JSONValue(parsing: "99999999999999999999") == .number(1e20))
    }

    @Test("an object's members are listed in the order written, under the same rules as any JSON")
    func objectMembers() throws {
        var members: [String] = []
        try JSONValue.forEachObjectMember(parsing: Array(#" {"b":1,"a":[true,null],"c":{"d":"e"}} "#.utf8)) {
            name, value in members.append("\(name)=\(value.serialized())")
        }
        #expect(members == ["b=1", "a=[true,null]", "c={\"d\":\"e\"}"])
        for text in ["[1]", "{} x", "{\"a\":01}", "{\"a\":{\"b\":1,\"b\":2}}", "", "{"] {
            #expect(throws: JSONValue.ParseError.self, "\(text)") {
                try JSONValue.forEachObjectMember(parsing: Array(text.utf8)) { _, _ in }
            }
        }
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

    @Test("what a terminal would obey is escaped: DEL, C1, line separators, bidi and other format characters")
    func terminalSafeEscaping() throws {
        // C1 CSI clearing the screen, a right-to-left override, a line separator, DEL, a language
        // tag (a format character beyond the BMP, as a surrogate pair), beside plain letters.
        let value: JSONValue = .string("x\u{9B}2J\u{202E}gpj.exe\u{2028}\u{7F}\u{E0001}é\u{1F512}")
        let text = value.serialized()
        #expect(text == "\"x\\u009b2J\\u202egpj.exe\\u2028\\u007f\\udb40\\udc01é\u{1F512}\"")
        #expect(try JSONValue(parsing: text) == value)
        #expect(!text.unicodeScalars.contains { OAuthError.isUnprintable($0) })
        // ASCII stays on the fast path, as written.
        #expect(JSONValue.string("plain-ASCII_0.9~").serialized() == "\"plain-ASCII_0.9~\"")
    }
}
