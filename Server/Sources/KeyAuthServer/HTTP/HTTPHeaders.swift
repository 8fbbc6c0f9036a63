/// HTTP header fields, looked up case-insensitively (RFC 9110 section 5.1), in arrival order.
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    /// One field as received or to be sent.
    public struct Field: Sendable, Hashable {
        /// The name as written.
        public var name: String
        /// The value.
        public var value: String
    }

    private var fields: [Field] = []

    /// Creates an empty set of headers.
    public init() {}

    /// Creates headers from name-value pairs, in order.
    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// The first value of `name`, ignoring case; nil when absent.
    public subscript(name: String) -> String? {
        let lowered = name.lowercased()
        return fields.first { $0.name.lowercased() == lowered }?.value
    }

    /// Every value of `name`, ignoring case, in order (for repeated fields like
    /// `X-Forwarded-For`).
    public func values(for name: String) -> [String] {
        let lowered = name.lowercased()
        return fields.filter { $0.name.lowercased() == lowered }.map(\.value)
    }

    /// Adds a field, keeping any existing ones with the same name.
    public mutating func add(_ name: String, _ value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every field named `name` with one field.
    public mutating func set(_ name: String, _ value: String) {
        let lowered = name.lowercased()
        fields.removeAll { $0.name.lowercased() == lowered }
        fields.append(Field(name: name, value: value))
    }

    /// Iterates the fields in order.
    public func makeIterator() -> IndexingIterator<[Field]> {
        fields.makeIterator()
    }
}
