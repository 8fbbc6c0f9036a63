/// A route's path as declared: literal segments and `{name}` parameters, such as
/// `/v1/devices/{kid}/approve`, and at the end optionally `{name*}`, which takes the rest of
/// the path (one segment or more): a feature's catch-all, so that an unknown path under
/// `/account` is counted as `/account/{unknown}` and answered by the account page's rules.
///
/// The declared text (with `*` left out) is the route's metrics label and its row in the
/// protocol's endpoint table, so a path is written once. A parameter matches one non-empty
/// segment, never a `/`.
package struct PathPattern: Sendable, Hashable, CustomStringConvertible {
    /// One segment between slashes.
    package enum Segment: Sendable, Hashable {
        case literal(String)
        case parameter(String)
        /// `{name*}`, last: one or more segments, joined with `/`.
        case rest(String)
    }

    /// The pattern as written, without a rest parameter's `*`: the metrics label.
    package let description: String
    package let segments: [Segment]

    /// Parses `text`, which starts with `/`; `{name}` in a whole segment is a parameter.
    package init(_ text: String) {
        description = text.replacing("*}", with: "}")
        segments = text.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { part in
            guard part.count > 2, part.hasPrefix("{"), part.hasSuffix("}") else { return .literal(String(part)) }
            let name = part.dropFirst().dropLast()
            return name.hasSuffix("*") ? .rest(String(name.dropLast())) : .parameter(String(name))
        }
    }

    /// Whether the pattern ends in a `{name*}` that takes the rest of the path.
    package var isCatchAll: Bool {
        if case .rest = segments.last { return true }
        return false
    }

    /// Whether the pattern names no parameter: it matches one path, its own text.
    package var isLiteral: Bool {
        segments.allSatisfy { if case .literal = $0 { true } else { false } }
    }

    /// The parameters of `path` when it matches, by name; nil when it does not.
    package func match(_ path: String) -> RouteParameters? {
        Self.segments(of: path).flatMap { match(segments: $0) }
    }

    /// The segments of `path` between its slashes, or nil when it does not start with one; a
    /// router splits a request's path once and matches every pattern against the result.
    package static func segments(of path: String) -> [Substring]? {
        let bytes = path.utf8
        guard bytes.first == UInt8(ascii: "/") else { return nil }
        // At each "/" byte, not each "/" character: a path is bytes, and splitting by
        // characters (grapheme clusters) cost a login a microsecond and a half.
        var segments: [Substring] = []
        segments.reserveCapacity(6)
        var start = bytes.index(after: bytes.startIndex)
        var index = start
        while index < bytes.endIndex {
            if bytes[index] == UInt8(ascii: "/") {
                segments.append(path[start..<index])
                start = bytes.index(after: index)
            }
            index = bytes.index(after: index)
        }
        segments.append(path[start..<bytes.endIndex])
        return segments
    }

    /// The parameters of a path already split by ``segments(of:)`` when it matches.
    package func match(segments parts: [Substring]) -> RouteParameters? {
        var values: [String: String] = [:]
        for (index, segment) in segments.enumerated() {
            guard index < parts.count else { return nil }
            switch segment {
            case .literal(let text):
                guard parts[index] == text else { return nil }
            case .parameter(let name):
                guard !parts[index].isEmpty else { return nil }
                values[name] = String(parts[index])
            case .rest(let name):
                values[name] = parts[index...].joined(separator: "/")
                return RouteParameters(values: values)
            }
        }
        return parts.count == segments.count ? RouteParameters(values: values) : nil
    }
}

/// The values a request's path gave a route's `{name}` parameters.
package struct RouteParameters: Sendable, Equatable {
    package var values: [String: String]

    package init(values: [String: String] = [:]) {
        self.values = values
    }

    /// The value of `name`. A route's handler asks only for the names its pattern declares,
    /// which a match always fills; an empty string stands for a name the pattern lacks, which
    /// then matches no stored record.
    package subscript(name: String) -> String {
        values[name] ?? ""
    }
}
