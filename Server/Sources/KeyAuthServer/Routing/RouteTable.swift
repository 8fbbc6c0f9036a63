/// One route: the methods it answers on one path pattern, and what answers them.
///
/// A feature declares its routes once, as a list of these; the router, the `405 Allow` header,
/// the metrics labels and the protocol's endpoint table all read that list.
///
/// A class: every request takes its route out of the shared table, and a reference costs one
/// retain, where a copy of the fields retained five, each a count that both worker threads
/// write.
package final class RouteDeclaration<Handler: Sendable>: Sendable {
    /// The methods answered, `HEAD` among them where it is (the transport sends no body).
    package let methods: [HTTPMethod]
    package let pattern: PathPattern
    package let handler: Handler

    /// The methods as the `Allow` header lists them (sorted once, not per request).
    package let allowedMethods: [HTTPMethod]

    package init(_ methods: [HTTPMethod], _ pattern: String, _ handler: Handler) {
        self.methods = methods
        self.pattern = PathPattern(pattern)
        self.handler = handler
        allowedMethods = Set(methods).sorted()
    }

    /// The metrics label: the pattern as declared, never a raw path.
    package var label: String { pattern.description }
}

/// Routes in the order they are tried; the first whose pattern matches a path owns it.
package struct RouteTable<Handler: Sendable>: Sendable {
    package let routes: [RouteDeclaration<Handler>]
    /// The routes without and with a catch-all pattern, split once: every request tries the
    /// first, and the second only for a path none of those matched.
    private let catchAllRoutes: [RouteDeclaration<Handler>]
    /// The routes without a catch-all that can match a path, by the path's first segment: those
    /// whose pattern starts with that literal and those that start with a parameter, in
    /// declaration order. A request tries only its own group, not the whole table.
    private let exactRoutesByFirstSegment: [String: [RouteDeclaration<Handler>]]
    /// Those that start with a parameter: all that can match a first segment no pattern names.
    private let exactRoutesStartingWithParameter: [RouteDeclaration<Handler>]
    /// The answer for each path that a pattern spells out in full, found once: a request for
    /// one (the token endpoint's among them) costs a lookup instead of splitting its path and
    /// trying patterns, a microsecond and a half of every login.
    private let literalPaths: [String: LiteralPath]

    /// The routes whose patterns match one literal path, in declaration order, with what each
    /// takes from it, and the answer when none has the request's method. A class, so that a
    /// lookup retains one reference instead of copying three arrays' worth.
    private final class LiteralPath: Sendable {
        let routes: [(route: RouteDeclaration<Handler>, parameters: RouteParameters)]
        let allowed: [HTTPMethod]
        let label: String

        init(
            routes: [(route: RouteDeclaration<Handler>, parameters: RouteParameters)], allowed: [HTTPMethod],
            label: String
        ) {
            self.routes = routes
            self.allowed = allowed
            self.label = label
        }
    }

    package init(_ routes: [RouteDeclaration<Handler>]) {
        self.routes = routes
        let exactRoutes = routes.filter { !$0.pattern.isCatchAll }
        catchAllRoutes = routes.filter(\.pattern.isCatchAll)
        func firstLiteral(_ route: RouteDeclaration<Handler>) -> String? {
            if case .literal(let text)? = route.pattern.segments.first { return text }
            return nil
        }
        exactRoutesStartingWithParameter = exactRoutes.filter { firstLiteral($0) == nil }
        var groups: [String: [RouteDeclaration<Handler>]] = [:]
        for literal in Set(exactRoutes.compactMap(firstLiteral)) {
            groups[literal] = exactRoutes.filter { firstLiteral($0) == nil || firstLiteral($0) == literal }
        }
        exactRoutesByFirstSegment = groups
        var literalPaths: [String: LiteralPath] = [:]
        for route in exactRoutes where route.pattern.isLiteral {
            let path = route.pattern.description
            guard literalPaths[path] == nil, let segments = PathPattern.segments(of: path) else { continue }
            // Every route that matches the path, a parameter pattern declared earlier included,
            // as the slower match below would try them.
            let matching = exactRoutes.compactMap { candidate in
                candidate.pattern.match(segments: segments).map { (route: candidate, parameters: $0) }
            }
            literalPaths[path] = LiteralPath(
                routes: matching, allowed: Set(matching.flatMap(\.route.allowedMethods)).sorted(),
                label: matching.first?.route.label ?? route.label)
        }
        self.literalPaths = literalPaths
    }

    /// How a request's method and path meet the table.
    package enum Match: Sendable {
        /// A route owns the path and answers the method.
        case found(RouteDeclaration<Handler>, RouteParameters)
        /// Routes own the path but none answers the method: 405, with these in `Allow`, and
        /// the label of the path's first route for metrics.
        case methodNotAllowed(allowed: [HTTPMethod], label: String)
        /// No route owns the path: 404.
        case notFound
    }

    /// The route answering `method` on `path`. Several routes may share a pattern with
    /// different methods (one per handler); the `Allow` list is all of theirs. A catch-all
    /// (a pattern ending in `{name*}`) is tried only for a path no other pattern matches, so
    /// that a known path with the wrong method is 405, not the catch-all's answer.
    package func match(method: String, path: String) -> Match {
        let requested = HTTPMethod(requestMethod: method)
        if let literal = literalPaths[path] {
            for index in literal.routes.indices
            where requested.map(literal.routes[index].route.allowedMethods.contains) ?? false {
                return .found(literal.routes[index].route, literal.routes[index].parameters)
            }
            return .methodNotAllowed(allowed: literal.allowed, label: literal.label)
        }
        guard let segments = PathPattern.segments(of: path) else { return .notFound }
        let exactRoutes =
            segments.first.flatMap { exactRoutesByFirstSegment[String($0)] } ?? exactRoutesStartingWithParameter
        let exact = match(requested, segments, among: exactRoutes)
        guard case .notFound = exact else { return exact }
        return match(requested, segments, among: catchAllRoutes)
    }

    private func match(
        _ requested: HTTPMethod?, _ segments: [Substring], among candidates: [RouteDeclaration<Handler>]
    ) -> Match {
        var allowed: Set<HTTPMethod> = []
        var firstLabel: String?
        // By index: a route is retained only when it is the answer.
        for index in candidates.indices {
            guard let parameters = candidates[index].pattern.match(segments: segments) else { continue }
            if let requested, candidates[index].allowedMethods.contains(requested) {
                return .found(candidates[index], parameters)
            }
            allowed.formUnion(candidates[index].allowedMethods)
            firstLabel = firstLabel ?? candidates[index].label
        }
        guard let firstLabel else { return .notFound }
        return .methodNotAllowed(allowed: allowed.sorted(), label: firstLabel)
    }

    /// The metrics label of `path` whatever the method: its route's pattern, or nil for a path
    /// no route owns.
    package func label(for path: String) -> String? {
        switch match(method: HTTPMethod.get.rawValue, path: path) {
        case .found(let route, _): route.label
        case .methodNotAllowed(_, let label): label
        case .notFound: nil
        }
    }

    /// Every declared pattern with the methods it answers (`HEAD` left out: the protocol's
    /// table names `GET`), in declaration order: what the protocol's endpoint table lists.
    /// Catch-alls name no endpoint and are left out.
    package var endpoints: [(methods: [HTTPMethod], pattern: String)] {
        var order: [String] = []
        var methods: [String: Set<HTTPMethod>] = [:]
        for route in routes where !route.pattern.isCatchAll {
            if methods[route.label] == nil { order.append(route.label) }
            methods[route.label, default: []].formUnion(route.methods.filter { $0 != .head })
        }
        return order.map { (methods: (methods[$0] ?? []).sorted(), pattern: $0) }
    }

    /// The tables of several features as one, tried in order.
    package static func combining(_ tables: [RouteTable<Handler>]) -> RouteTable<Handler> {
        RouteTable(tables.flatMap(\.routes))
    }
}
