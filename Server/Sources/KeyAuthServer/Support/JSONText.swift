import KeyAuth

/// Appends JSON text to a byte buffer, for the few documents the login path writes on every
/// request (the access token's header and claims, the token response).
///
/// `JSONValue.serialized()` builds a dictionary, sorts its keys and escapes character by
/// character; on the login path that was a tenth of the CPU left after RSA. The documents built
/// here have a fixed shape, so their members are written in `JSONValue`'s order and a string
/// without anything to escape (the common case: base64url, user names, URLs) is copied as is.
enum JSONText {
    /// Appends `value` as a JSON string literal, quotes included.
    static func appendString(_ value: String, to output: inout [UInt8]) {
        let needsEscaping = value.utf8.contains { byte in
            byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
        }
        if needsEscaping {
            output.append(contentsOf: JSONValue.string(value).serialized().utf8)
        } else {
            output.append(UInt8(ascii: "\""))
            output.append(contentsOf: value.utf8)
            output.append(UInt8(ascii: "\""))
        }
    }

    /// Appends `text` as it is: JSON punctuation and member names.
    static func appendRaw(_ text: String, to output: inout [UInt8]) {
        output.append(contentsOf: text.utf8)
    }

    /// Appends `value` in decimal.
    static func appendInteger(_ value: Int64, to output: inout [UInt8]) {
        output.append(contentsOf: String(value).utf8)
    }
}
