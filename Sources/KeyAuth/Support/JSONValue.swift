/// A JSON value with a strict parser and a deterministic serializer.
///
/// JWT checks need what `JSONSerialization` hides: whether a number was written as an integer,
/// whether an object repeats a key (two `exp` members must not mean whichever one a parser
/// keeps), and byte-exact control of the output.
package enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number written without fraction or exponent that fits in 64 bits.
    case integer(Int64)
    /// Any other number.
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The string, when this is a string.
    package var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer, when this is an integer (not `1.0`, not `"1"`).
    package var integerValue: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    /// The members, when this is an object.
    package var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The elements, when this is an array.
    package var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    package subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }
}

// MARK: - Parsing

extension JSONValue {
    /// Why a text is not acceptable JSON.
    package struct ParseError: Error, Sendable, Equatable {
        package let reason: String
        package let offset: Int
    }

    /// Parses UTF-8 JSON text strictly: one value, optional surrounding whitespace, no duplicate
    /// object keys, nesting at most `maximumDepth`.
    package init<Bytes: Collection>(parsing bytes: Bytes, maximumDepth: Int = 32) throws(ParseError)
    where Bytes.Element == UInt8 {
        var parser = Parser(bytes: Array(bytes), maximumDepth: maximumDepth)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count else { throw parser.error("trailing characters") }
        self = value
    }

    /// Parses a JSON string.
    package init(parsing text: String) throws(ParseError) {
        try self.init(parsing: Array(text.utf8))
    }

    /// Hands `body` each member of the JSON object `bytes`, in the order written, parsed as
    /// strictly as ``init(parsing:maximumDepth:)`` but not checked for repeated names: for
    /// ``JWTClaims``, which sorts the members and refuses a repeated name itself, without a
    /// dictionary in between.
    ///
    /// - Throws: ``ParseError`` when `bytes` is not one JSON object (or is not strict JSON).
    package static func forEachObjectMember(
        parsing bytes: [UInt8], maximumDepth: Int = 32, _ body: (String, JSONValue) -> Void
    ) throws(ParseError) {
        var parser = Parser(bytes: bytes, maximumDepth: maximumDepth)
        parser.skipWhitespace()
        guard parser.index < bytes.count, bytes[parser.index] == UInt8(ascii: "{") else {
            throw parser.error("expected an object")
        }
        try parser.parseMembers(depth: 0) { name, value in
            body(name, value)
            return true
        }
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.error("trailing characters") }
    }
}

private struct Parser {
    let bytes: [UInt8]
    let maximumDepth: Int
    var index = 0

    init(bytes: [UInt8], maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    func error(_ reason: String) -> JSONValue.ParseError {
        JSONValue.ParseError(reason: reason, offset: index)
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func expect(_ literal: String) throws(JSONValue.ParseError) {
        for byte in literal.utf8 {
            guard index < bytes.count, bytes[index] == byte else { throw error("invalid literal") }
            index += 1
        }
    }

    mutating func parseValue(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error("nesting too deep") }
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character")
        }
    }

    mutating func parseObject(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        var members: [String: JSONValue] = [:]
        try parseMembers(depth: depth) { name, value in members.updateValue(value, forKey: name) == nil }
        return .object(members)
    }

    /// Parses the object at `index` and hands each member to `accept` in the order written;
    /// `accept` returns false for a name it already has, a duplicate key.
    mutating func parseMembers(
        depth: Int, _ accept: (String, JSONValue) -> Bool
    ) throws(JSONValue.ParseError) {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth + 1)
            guard accept(key, value) else { throw error("duplicate key") }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw error("expected ',' or '}'") }
            index += 1
            return
        }
    }

    mutating func parseArray(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw error("expected ',' or ']'") }
            index += 1
            return .array(elements)
        }
    }

    mutating func parseHex4() throws(JSONValue.ParseError) -> UInt16 {
        guard index + 4 <= bytes.count else { throw error("short unicode escape") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(ofDigit: bytes[index]) else { throw error("bad unicode escape") }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    mutating func parseString() throws(JSONValue.ParseError) -> String {
        index += 1
        // Most strings (names, base64url, key ids) have no escape: validate those where they lie.
        var end = index
        while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20
        {
            end += 1
        }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            let start = index
            index = end + 1
            guard let string = UTF8Text.string(validating: bytes[start..<end]) else {
                throw error("invalid UTF-8")
            }
            return string
        }
        var output = Array(bytes[index..<end])
        index = end
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = UTF8Text.string(validating: output[...]) else { throw error("invalid UTF-8") }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw error("unterminated escape") }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""): output.append(0x22)
                case UInt8(ascii: "\\"): output.append(0x5C)
                case UInt8(ascii: "/"): output.append(0x2F)
                case UInt8(ascii: "b"): output.append(0x08)
                case UInt8(ascii: "f"): output.append(0x0C)
                case UInt8(ascii: "n"): output.append(0x0A)
                case UInt8(ascii: "r"): output.append(0x0D)
                case UInt8(ascii: "t"): output.append(0x09)
                case UInt8(ascii: "u"):
                    let unit = try parseHex4()
                    var scalarValue = UInt32(unit)
                    if (0xD800..<0xDC00).contains(unit) {
                        guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("lone surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("lone surrogate") }
                        scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(unit) {
                        throw error("lone surrogate")
                    }
                    guard let scalar = Unicode.Scalar(scalarValue) else { throw error("bad scalar") }
                    output.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: throw error("bad escape")
                }
            case 0x00..<0x20:
                throw error("control character in string")
            default:
                output.append(byte)
                index += 1
            }
        }
    }

    mutating func parseNumber() throws(JSONValue.ParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error("bad number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        } else {
            throw error("bad number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw error("bad fraction") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw error("bad exponent") }
        }
        if isInteger, let value = integer(from: start, to: index) { return .integer(value) }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw error("number out of range") }
        return .number(value)
    }

    /// The integer written in `bytes[start..<end]` (an optional minus, then digits), or nil
    /// when it does not fit in 64 bits; read digit by digit, as JWT times are on every token.
    func integer(from start: Int, to end: Int) -> Int64? {
        let isNegative = bytes[start] == UInt8(ascii: "-")
        var value: Int64 = 0
        for position in (isNegative ? start + 1 : start)..<end {
            let digit = Int64(bytes[position] &- UInt8(ascii: "0"))
            // Negative values accumulate downwards, so Int64.min fits too.
            let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
            let (next, overflowAgain) =
                isNegative ? shifted.subtractingReportingOverflow(digit) : shifted.addingReportingOverflow(digit)
            guard !overflow, !overflowAgain else { return nil }
            value = next
        }
        return value
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    package init(stringLiteral value: String) { self = .string(value) }
    package init(integerLiteral value: Int64) { self = .integer(value) }
    package init(booleanLiteral value: Bool) { self = .bool(value) }
}
