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
