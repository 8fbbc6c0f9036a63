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
    /// control characters escaped, and so are DEL, the C1 controls, the line and paragraph
    /// separators and the format characters (bidirectional overrides among them) as `\uXXXX`:
    /// JSON written here reaches terminals (`keyauth devices --json`, a server's answer read with
    /// curl) with names that others chose, and a terminal takes C1 `CSI` for a command. Everything
    /// else (non-ASCII included) is UTF-8.
    package static func appendString(_ value: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        // Any non-ASCII byte sends the string to the slow path, which looks at its scalars.
        func needsEscape(_ byte: UInt8) -> Bool {
            byte < 0x20 || byte >= 0x7F || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
        }
        // A native string's bytes are scanned and copied in place, much faster than through its
        // UTF8View.
        let copied = value.utf8.withContiguousStorageIfAvailable { bytes in
            guard !bytes.contains(where: needsEscape) else { return false }
            output.append(contentsOf: bytes)
            return true
        }
        if copied == true {
            output.append(UInt8(ascii: "\""))
            return
        }
        if copied == nil, !value.utf8.contains(where: needsEscape) {
            output.append(contentsOf: value.utf8)
            output.append(UInt8(ascii: "\""))
            return
        }
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": appendRaw("\\\"", to: &output)
            case "\\": appendRaw("\\\\", to: &output)
            case "\n": appendRaw("\\n", to: &output)
            case "\r": appendRaw("\\r", to: &output)
            case "\t": appendRaw("\\t", to: &output)
            case "\u{8}": appendRaw("\\b", to: &output)
            case "\u{C}": appendRaw("\\f", to: &output)
            default:
                guard isEscapedAsCode(scalar) else {
                    UTF8.encode(scalar) { output.append($0) }
                    continue
                }
                // Beyond the BMP, as a surrogate pair (RFC 8259 section 7).
                UTF16.encode(scalar) { unit in
                    appendRaw("\\u" + Hex.encode([UInt8(unit >> 8), UInt8(unit & 0xFF)]), to: &output)
                }
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Whether `scalar` is written as `\uXXXX`: a control character (C0, DEL, C1), a line or
    /// paragraph separator, or a format character.
    static func isEscapedAsCode(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028
            || scalar.value == 0x2029 || scalar.properties.generalCategory == .format
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
