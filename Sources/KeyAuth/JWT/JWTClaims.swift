/// The claims of a JWT, read through typed accessors and written through typed setters.
///
/// Reading fails rather than guessing: ``string(_:)`` on a missing claim or a number throws
/// `.claimInvalid`, where a dictionary lookup would have given an empty string that a caller
/// might compare against. Members are kept in the order they are written, `iss`, `sub` and `aud`
/// first and the rest by name, so the same claims always make the same bytes.
public struct JWTClaims: Sendable, Hashable {
    /// The claims written before all others, in this order.
    static let leadingNames = ["iss", "sub", "aud"]

    private struct Member: Sendable, Hashable {
        let name: String
        var value: JSONValue
    }

    /// The members in serialization order.
    private var members: [Member] = []

    /// No claims.
    public init() {}

    /// The members of a JSON object.
    package init(_ object: [String: JSONValue]) {
        for (name, value) in object { self[name] = value }
    }

    /// The members of the JSON object text `bytes`, parsed strictly (one object, no repeated
    /// name, nesting at most 32 deep) straight into their order, with no dictionary between:
    /// every token a server verifies is read here.
    ///
    /// - Throws: ``JSONValue/ParseError`` when `bytes` is not such an object.
    package init(parsingObject bytes: [UInt8]) throws(JSONValue.ParseError) {
        var parsed: [Member] = []
        parsed.reserveCapacity(12)
        try JSONValue.forEachObjectMember(parsing: bytes) { name, value in
            parsed.append(Member(name: name, value: value))
        }
        // Claims written by this library arrive in their order already: each name strictly after
        // the one before, so none repeats, and there is nothing to sort or check.
        let inOrder = parsed.indices.dropFirst().allSatisfy { Self.precedes(parsed[$0 - 1].name, parsed[$0].name) }
        if !inOrder {
            parsed.sort { Self.precedes($0.name, $1.name) }
            // Sorted, a repeated name is next to its first.
            for index in parsed.indices.dropFirst() where parsed[index].name == parsed[index - 1].name {
                throw JSONValue.ParseError(reason: "duplicate key", offset: 0)
            }
        }
        members = parsed
    }

    /// The claim names, in the order they are written.
    public var names: [String] { members.map(\.name) }

    /// The first claim name, in written order, that satisfies `predicate`: for checks on every
    /// token, without building ``names``.
    package func firstName(where predicate: (String) -> Bool) -> String? {
        members.first { predicate($0.name) }?.name
    }

    /// Whether claim `name` is present (with any value, `null` included).
    public func contains(_ name: String) -> Bool {
        members.contains { $0.name == name }
    }

    /// A claim as JSON, or nil when absent; setting nil removes it.
    package subscript(name: String) -> JSONValue? {
        get { members.first { $0.name == name }?.value }
        set {
            guard let newValue else {
                members.removeAll { $0.name == name }
                return
            }
            // Room for a token's usual claims at once, instead of growing one by one.
            if members.isEmpty { members.reserveCapacity(8) }
            if members.last.map({ Self.precedes($0.name, name) }) ?? true {
                // After every name present, so none of them: claims set in writing order.
                members.append(Member(name: name, value: newValue))
            } else if let index = members.firstIndex(where: { $0.name == name }) {
                members[index].value = newValue
            } else {
                let position = members.firstIndex { Self.precedes(name, $0.name) } ?? members.endIndex
                members.insert(Member(name: name, value: newValue), at: position)
            }
        }
    }

    /// Whether `lhs` is written before `rhs`: leading names in their order, then by name.
    private static func precedes(_ lhs: String, _ rhs: String) -> Bool {
        let left = rank(lhs)
        let right = rank(rhs)
        return left != right ? left < right : lhs < rhs
    }

    /// A name's place among ``leadingNames``, or their count for any other name.
    private static func rank(_ name: String) -> Int {
        switch name {
        case "iss": 0
        case "sub": 1
        case "aud": 2
        default: 3
        }
    }

    // MARK: Reading

    /// The string claim `name`.
    ///
    /// - Throws: `.claimInvalid` when it is absent or not a string.
    public func string(_ name: String) throws(KeyAuthError) -> String {
        guard let value = self[name]?.stringValue else { throw Self.invalid(name, "a string") }
        return value
    }

    /// The integer claim `name` (written without fraction or exponent, as JWT times are).
    ///
    /// - Throws: `.claimInvalid` when it is absent or not an integer (`1.0` and `"1"` are not).
    public func integer(_ name: String) throws(KeyAuthError) -> Int64 {
        guard let value = self[name]?.integerValue else { throw Self.invalid(name, "an integer") }
        return value
    }

    /// The boolean claim `name`.
    ///
    /// - Throws: `.claimInvalid` when it is absent or not `true` or `false`.
    public func bool(_ name: String) throws(KeyAuthError) -> Bool {
        guard case .bool(let value)? = self[name] else { throw Self.invalid(name, "a boolean") }
        return value
    }

    /// The claim `name` as a list of strings: an array of strings, or one string (as `aud` may
    /// be written).
    ///
    /// - Throws: `.claimInvalid` when it is absent or anything else.
    public func strings(_ name: String) throws(KeyAuthError) -> [String] {
        switch self[name] {
        case .string(let value)?: return [value]
        case .array(let elements)?:
            let strings = elements.compactMap(\.stringValue)
            guard strings.count == elements.count else { throw Self.invalid(name, "a list of strings") }
            return strings
        default: throw Self.invalid(name, "a list of strings")
        }
    }

    /// The claim `name` as compact JSON text, for a nested value an application reads with its
    /// own decoder.
    ///
    /// - Throws: `.claimInvalid` when it is absent.
    public func json(_ name: String) throws(KeyAuthError) -> String {
        guard let value = self[name] else { throw Self.invalid(name, "present") }
        return value.serialized()
    }

    private static func invalid(_ name: String, _ expected: String) -> KeyAuthError {
        KeyAuthError(.claimInvalid, "the claim \"\(name.prefix(64))\" must be \(expected)")
    }

    // MARK: Writing

    /// Sets claim `name` to a string.
    public mutating func set(_ name: String, string value: String) {
        self[name] = .string(value)
    }

    /// Sets claim `name` to an integer.
    public mutating func set(_ name: String, integer value: Int64) {
        self[name] = .integer(value)
    }

    /// Sets claim `name` to a boolean.
    public mutating func set(_ name: String, bool value: Bool) {
        self[name] = .bool(value)
    }

    /// Sets claim `name` to an array of strings.
    public mutating func set(_ name: String, strings value: [String]) {
        self[name] = .array(value.map(JSONValue.string))
    }

    /// Sets claim `name` to the value of `json`, parsed strictly (one value, no duplicate keys,
    /// nesting at most 32 deep), for a nested object an application builds with its own encoder.
    ///
    /// - Throws: `.invalidArgument` when `json` is not such a value; the claims are unchanged.
    public mutating func setJSON(_ name: String, json: String) throws(KeyAuthError) {
        do {
            self[name] = try JSONValue(parsing: json)
        } catch {
            throw KeyAuthError(
                .invalidArgument, "the value for claim \"\(name.prefix(64))\" is not valid JSON: \(error.reason)")
        }
    }

    /// Removes claim `name`.
    public mutating func remove(_ name: String) {
        self[name] = nil
    }

    /// Sets every claim of `other`, replacing claims of the same name.
    public mutating func merge(_ other: JWTClaims) {
        guard !members.isEmpty else {
            members = other.members
            return
        }
        // Both lists are in writing order: one pass, as a merge sort merges.
        var merged: [Member] = []
        merged.reserveCapacity(members.count + other.members.count)
        var mine = members.startIndex
        var theirs = other.members.startIndex
        while mine < members.endIndex, theirs < other.members.endIndex {
            let name = members[mine].name
            let otherName = other.members[theirs].name
            if name == otherName {
                merged.append(other.members[theirs])
                mine += 1
                theirs += 1
            } else if Self.precedes(name, otherName) {
                merged.append(members[mine])
                mine += 1
            } else {
                merged.append(other.members[theirs])
                theirs += 1
            }
        }
        merged.append(contentsOf: members[mine...])
        merged.append(contentsOf: other.members[theirs...])
        members = merged
    }

    // MARK: Serializing

    /// The claims as a JSON object value.
    package var jsonValue: JSONValue {
        .object(Dictionary(uniqueKeysWithValues: members.map { ($0.name, $0.value) }))
    }

    /// Compact JSON text of the claims, in their order.
    package func serializedBytes() -> [UInt8] {
        var output: [UInt8] = [UInt8(ascii: "{")]
        output.reserveCapacity(256)
        for (position, member) in members.enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            JSONText.appendString(member.name, to: &output)
            output.append(UInt8(ascii: ":"))
            member.value.write(to: &output, leadingKeys: Self.leadingNames)
        }
        output.append(UInt8(ascii: "}"))
        return output
    }
}
