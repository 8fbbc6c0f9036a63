/// A request the routing refuses before any service sees it: an unknown path, a method the
/// path does not answer, a body over the limit.
///
/// Mapped to HTTP, with ``ServiceError`` and ``StorageError``, in ``HTTPResponse/init(error:)``.
struct RoutingError: Error, Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        /// No endpoint has this path.
        case notFound
        /// The path exists but not with this method; carries the methods it answers.
        case methodNotAllowed(allowed: [String])
        /// The body exceeded the limit.
        case payloadTooLarge
    }

    let kind: Kind
    /// Text for the client.
    let description: String

    init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }

    /// An unknown path.
    static let noSuchEndpoint = RoutingError(.notFound, "no such endpoint")

    /// `methods` are the only ones the path answers.
    static func methodNotAllowed(_ methods: [String]) -> RoutingError {
        RoutingError(.methodNotAllowed(allowed: methods), "method not allowed on this endpoint")
    }
}
