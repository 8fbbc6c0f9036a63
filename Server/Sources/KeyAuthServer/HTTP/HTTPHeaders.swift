/// HTTP header fields, looked up case-insensitively (RFC 9110 section 5.1), in arrival order.
package struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    /// One field as received or to be sent.
    package struct Field: Sendable, Hashable {
        /// The name as written.
        package var name: String
        /// The value.
        package var value: String
    }

    private var fields: [Field] = []

    /// Creates an empty set of headers.
    package init() {}

    /// Creates headers from name-value pairs, in order.
    package init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// The first value of `name`, ignoring case; nil when absent.
    package subscript(name: String) -> String? {
        fields.first { Self.sameName($0.name, name) }?.value
    }

    /// Every value of `name`, ignoring case, in order (for repeated fields like
    /// `X-Forwarded-For`).
    package func values(for name: String) -> [String] {
        fields.filter { Self.sameName($0.name, name) }.map(\.value)
    }

    /// Adds a field, keeping any existing ones with the same name.
    package mutating func add(_ name: String, _ value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every field named `name` with one field.
    package mutating func set(_ name: String, _ value: String) {
        fields.removeAll { Self.sameName($0.name, name) }
        fields.append(Field(name: name, value: value))
    }

    /// Field names are ASCII tokens (RFC 9110 section 5.1), compared ignoring ASCII case without
    /// building lowered copies: every request looks up several fields. Native strings are
    /// compared byte by byte in their storage; iterating two `UTF8View`s in step cost several
    /// times as much.
    static func sameName(_ lhs: String, _ rhs: String) -> Bool {
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        let compared = lhs.utf8.withContiguousStorageIfAvailable { left in
            rhs.utf8.withContiguousStorageIfAvailable { right in
                left.indices.allSatisfy { asciiLowercased(left[$0]) == asciiLowercased(right[$0]) }
            }
        }
        if let compared = compared ?? nil { return compared }
        return zip(lhs.utf8, rhs.utf8).allSatisfy { asciiLowercased($0) == asciiLowercased($1) }
    }

    /// Whether the media type of a `Content-Type` value (before its parameters, without the
    /// spaces and tabs around it) is `expected`, which is lowercase, ignoring ASCII case. Every
    /// request with a body asks.
    package static func mediaType(of value: String, is expected: String) -> Bool {
        // Over the bytes, indexed by integers: through the string's UTF-8 view this took a login
        // a microsecond and a half.
        var value = value
        var expected = expected
        return value.withUTF8 { bytes in
            expected.withUTF8 { expected in
                var start = 0
                var end = bytes.firstIndex(of: UInt8(ascii: ";")) ?? bytes.count
                func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
                while start < end, isBlank(bytes[start]) { start += 1 }
                while start < end, isBlank(bytes[end - 1]) { end -= 1 }
                guard end - start == expected.count else { return false }
                for offset in 0..<expected.count where asciiLowercased(bytes[start + offset]) != expected[offset] {
                    return false
                }
                return true
            }
        }
    }

    private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
    }

    /// Iterates the fields in order.
    package func makeIterator() -> IndexingIterator<[Field]> {
        fields.makeIterator()
    }
}
