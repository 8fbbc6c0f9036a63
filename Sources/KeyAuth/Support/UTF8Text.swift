/// Strings from bytes that must be UTF-8: the text of every token and form a server reads.
package enum UTF8Text {
    /// `bytes` as a string, or nil when they are not valid UTF-8.
    ///
    /// ASCII (base64url, key ids, claim names: nearly every string a token carries) is checked
    /// and copied directly; other text goes through the standard library's validation, whose
    /// generic entry point cost each login a microsecond of type-metadata lookups.
    package static func string(validating bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Whether no byte has its top bit set, eight bytes a word.
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var bits: UInt64 = 0
        var offset = 0
        while offset + 8 <= bytes.count {
            bits |= raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            offset += 8
        }
        while offset < bytes.count {
            bits |= UInt64(bytes[offset])
            offset += 1
        }
        return bits & 0x8080_8080_8080_8080 == 0
    }

    /// `bytes` as a string, or nil when they are not valid UTF-8.
    package static func string(validating bytes: ArraySlice<UInt8>) -> String? {
        bytes.withUnsafeBufferPointer { string(validating: $0) }
    }
}

extension StringProtocol {
    /// Whether `other` is the same bytes: `==` on strings is Unicode canonical equivalence, so
    /// `"Kcb" == "\u{212A}cb"` (the Kelvin sign) holds, and an identifier compared that way
    /// (a redirect URI, a user name) would match text that a browser or a database treats as
    /// another.
    package func isSameBytes(as other: some StringProtocol) -> Bool {
        utf8.elementsEqual(other.utf8)
    }
}
