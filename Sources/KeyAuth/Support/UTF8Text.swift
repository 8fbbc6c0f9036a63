/// Strings from bytes that must be UTF-8: the text of every token and form a server reads.
package enum UTF8Text {
    /// `bytes` as a string, or nil when they are not valid UTF-8.
    ///
    /// ASCII (base64url, key ids, claim names: nearly every string a token carries) is checked
    /// and copied directly; other text goes through the standard library's validation, whose
    /// generic entry point cost each login a microsecond of type-metadata lookups.
    package static func string(validating bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }

    /// `bytes` as a string, or nil when they are not valid UTF-8.
    package static func string(validating bytes: ArraySlice<UInt8>) -> String? {
        bytes.withUnsafeBufferPointer { string(validating: $0) }
    }
}
