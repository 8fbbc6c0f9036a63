/// A request method the server can name: the ones it answers, and the others a metrics label
/// or an `Allow` header may mention.
///
/// Routes declare their methods with this type rather than strings, so a misspelt method is a
/// compile error instead of a route that silently answers 405.
package enum HTTPMethod: String, Sendable, CaseIterable, Comparable {
    case get = "GET"
    case head = "HEAD"
    case post = "POST"
    case put = "PUT"
    case delete = "DELETE"
    case patch = "PATCH"
    case options = "OPTIONS"

    /// The method a request names, or nil for anything else (an extension method, or bytes a
    /// confused client sent): such a request matches no route's methods.
    package init?(requestMethod: String) {
        self.init(rawValue: requestMethod)
    }

    /// The metrics label of a request's method: the method when it is one of these, `OTHER`
    /// otherwise, so that a client cannot mint label values.
    package static func label(of requestMethod: String) -> String {
        HTTPMethod(requestMethod: requestMethod)?.rawValue ?? "OTHER"
    }

    /// Orders methods as `Allow` headers list them: in declaration order.
    package static func < (lhs: HTTPMethod, rhs: HTTPMethod) -> Bool {
        let order = allCases
        return (order.firstIndex(of: lhs) ?? 0) < (order.firstIndex(of: rhs) ?? 0)
    }
}
