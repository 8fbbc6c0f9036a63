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
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
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
            guard members.updateValue(value, forKey: key) == nil else { throw error("duplicate key") }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw error("expected ',' or '}'") }
            index += 1
            return .object(members)
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
            guard let string = String(validating: bytes[start..<end], as: UTF8.self) else {
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
                guard let string = String(validating: output, as: UTF8.self) else { throw error("invalid UTF-8") }
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
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else { throw error("number out of range") }
        return .number(value)
    }
}

// MARK: - Serializing

extension JSONValue {
    /// Compact JSON text. Object members listed in `leadingKeys` come first in that order, the
    /// rest sorted, so that the output is the same on every run.
    package func serialized(leadingKeys: [String] = []) -> String {
        String(decoding: serializedBytes(leadingKeys: leadingKeys), as: UTF8.self)
    }

    /// The UTF-8 bytes of ``serialized(leadingKeys:)``, for callers that sign or send them.
    package func serializedBytes(leadingKeys: [String] = []) -> [UInt8] {
        var output: [UInt8] = []
        write(to: &output, leadingKeys: leadingKeys)
        return output
    }

    /// Appends the compact JSON text of this value to `output`.
    package func write(to output: inout [UInt8], leadingKeys: [String] = []) {
        switch self {
        case .null: JSONText.appendRaw("null", to: &output)
        case .bool(let value): JSONText.appendRaw(value ? "true" : "false", to: &output)
        case .integer(let value): JSONText.appendInteger(value, to: &output)
        case .number(let value):
            // Swift always prints a fraction or an exponent ("1.0", "1e+16"), so a number stays a
            // number through a round trip; non-finite values have no JSON form.
            JSONText.appendRaw(value.isFinite ? "\(value)" : "null", to: &output)
        case .string(let value): JSONText.appendString(value, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                element.write(to: &output, leadingKeys: leadingKeys)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            let leading = leadingKeys.filter { members[$0] != nil }
            let rest = members.keys.filter { !leading.contains($0) }.sorted()
            for (position, key) in (leading + rest).enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                JSONText.appendString(key, to: &output)
                output.append(UInt8(ascii: ":"))
                members[key]?.write(to: &output, leadingKeys: leadingKeys)
            }
            output.append(UInt8(ascii: "}"))
        }
    }
}

/// Appends JSON text to a byte buffer: the one JSON writer, used by ``JSONValue`` and directly by
/// the few documents written on every login (the access token's claims, the token response).
///
/// A string without anything to escape (the common case: base64url, user names, URLs) is copied
/// as it is; escaping character by character was a tenth of a login's CPU after RSA.
package enum JSONText {
    /// Appends `value` as a JSON string literal, quotes included: quotes, backslashes and
    /// control characters escaped, everything else (non-ASCII included) as UTF-8.
    package static func appendString(_ value: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        func needsEscape(_ byte: UInt8) -> Bool {
            byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
        }
        // A native string's bytes are scanned in place, much faster than through its UTF8View.
        let needsEscaping =
            value.utf8.withContiguousStorageIfAvailable { $0.contains(where: needsEscape) }
            ?? value.utf8.contains(where: needsEscape)
        guard needsEscaping else {
            output.append(contentsOf: value.utf8)
            output.append(UInt8(ascii: "\""))
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): appendRaw("\\\"", to: &output)
            case UInt8(ascii: "\\"): appendRaw("\\\\", to: &output)
            case 0x0A: appendRaw("\\n", to: &output)
            case 0x0D: appendRaw("\\r", to: &output)
            case 0x09: appendRaw("\\t", to: &output)
            case 0x08: appendRaw("\\b", to: &output)
            case 0x0C: appendRaw("\\f", to: &output)
            case 0x00..<0x20: appendRaw("\\u00" + Hex.encode([byte]), to: &output)
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Appends `text` as it is: JSON punctuation and member names.
    package static func appendRaw(_ text: String, to output: inout [UInt8]) {
        output.append(contentsOf: text.utf8)
    }

    /// Appends `value` in decimal.
    package static func appendInteger(_ value: Int64, to output: inout [UInt8]) {
        output.append(contentsOf: String(value).utf8)
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    package init(stringLiteral value: String) { self = .string(value) }
    package init(integerLiteral value: Int64) { self = .integer(value) }
    package init(booleanLiteral value: Bool) { self = .bool(value) }
}
