import Foundation

/// One document fetched for ``AccessTokenVerifier``: the discovery document or the JWK set.
public struct KeySetDocument: Sendable {
    /// The body.
    public var body: [UInt8]
    /// The `Cache-Control` header, whose `max-age` says how long the JWK set stays fresh.
    public var cacheControl: String?

    public init(body: [UInt8], cacheControl: String? = nil) {
        self.body = body
        self.cacheControl = cacheControl
    }
}

/// Fetches what ``AccessTokenVerifier`` needs over HTTP; tests inject their own.
public protocol KeySetFetcher: Sendable {
    /// GETs `url` and returns a 200 answer.
    ///
    /// - Throws: ``KeyAuthError`` `.transportFailed` (unreachable, timeout) or `.serverRejected`
    ///   (another status, a redirect).
    func fetch(_ url: String) async throws(KeyAuthError) -> KeySetDocument
}

/// The ``KeySetFetcher`` over the library's HTTP exchange: no redirects, no cookies, no cache
/// of its own, answers over 1 MiB refused.
public struct HTTPKeySetFetcher: KeySetFetcher {
    private let exchange: HTTPExchange

    /// - Parameter timeout: seconds a fetch may take.
    public init(timeout: TimeInterval = 10) {
        exchange = HTTPExchange(timeout: timeout)
    }

    public func fetch(_ url: String) async throws(KeyAuthError) -> KeySetDocument {
        guard URL(string: url) != nil else { throw KeyAuthError(.invalidArgument, "not a URL: \(url)") }
        var request = HTTPRequestSpec(url: url)
        request.setHeader("Accept", "application/json")
        request.setHeader("User-Agent", "keyauth/\(KeyAuthClient.version)")
        let reply = try await exchange.send(request, server: url)
        guard reply.status == 200 else {
            throw KeyAuthError(.serverRejected, "\(url) answered HTTP \(reply.status)")
        }
        return KeySetDocument(body: reply.body, cacheControl: reply.headers["cache-control"])
    }
}

/// The issuer's JWK set, fetched through discovery and cached (PROTOCOL.md section 3,
/// "Verifying tokens in a service").
///
/// - Fresh for the answer's `max-age`, bounded to ``minimumMaxAge`` ... ``maximumMaxAge``
///   (``defaultMaxAge`` without one).
/// - Fetched again when stale, or when a token names an unknown `kid` (a rotation), at most
///   once every ``refetchInterval`` seconds, so tokens naming made-up keys cannot make every
///   request fetch.
/// - When a fetch fails, the last set keeps serving until ``hardLimit`` seconds after it was
///   fetched; after that verification fails closed with `.keySetUnavailable`.
/// - With no set to serve (the issuer down since start, or for over ``hardLimit``), a failed
///   fetch is tried again at most once every ``refetchInterval`` seconds; until then every
///   verification fails at once with its error, so that an issuer coming back is not met by a
///   fetch from every request of every service.
actor KeySetCache {
    static let minimumMaxAge: Int64 = 60
    static let maximumMaxAge: Int64 = 86_400
    static let defaultMaxAge: Int64 = 300
    static let hardLimit: Int64 = 86_400
    static let refetchInterval: Int64 = 30

    private struct Cached {
        let set: JWKSet
        let fetchedAt: Int64
        let freshUntil: Int64
    }

    private let issuer: String
    private let fetcher: any KeySetFetcher
    private let clock: KeyAuthClock
    private let allowInsecureHTTP: Bool
    private var jwksURI: String?
    private var cached: Cached?
    private var lastAttempt: Int64 = .min
    /// The error of the last fetch when it left no set to serve; cleared by a success.
    private var lastFailure: KeyAuthError?
    private var inFlight: Task<Result<JWKSet, KeyAuthError>, Never>?

    init(issuer: String, fetcher: any KeySetFetcher, clock: KeyAuthClock, allowInsecureHTTP: Bool) {
        self.issuer = issuer
        self.fetcher = fetcher
        self.clock = clock
        self.allowInsecureHTTP = allowInsecureHTTP
    }

    /// The set to verify with: the cached one while fresh, else a new fetch (or the stale one
    /// within the hard limit when the fetch fails).
    func keySet() async throws(KeyAuthError) -> JWKSet {
        let now = clock.seconds
        // A clock set back since the fetch counts as time passed, not as time to come: waiting
        // out the step would keep a set the issuer changed, and refuse its new keys, as long.
        if let cached, now >= cached.fetchedAt, now < cached.freshUntil { return cached.set }
        if let cached, now >= lastAttempt, now < lastAttempt.addingSaturating(Self.refetchInterval),
            now < cached.fetchedAt.addingSaturating(Self.hardLimit)
        {
            return cached.set
        }
        // A clock set back since the failure asks again rather than waiting out the step.
        if let lastFailure, now >= lastAttempt, now < lastAttempt.addingSaturating(Self.refetchInterval) {
            throw lastFailure
        }
        return try await refresh()
    }

    /// The key `kid`, fetching the set again for an unknown `kid` when the last fetch is at
    /// least ``refetchInterval`` seconds old.
    func key(for kid: String) async throws(KeyAuthError) -> JWSPublicKey? {
        let set = try await keySet()
        if let key = set[kid] { return key }
        let now = clock.seconds
        guard now < lastAttempt || now >= lastAttempt.addingSaturating(Self.refetchInterval) else { return nil }
        return try await refresh()[kid]
    }

    private func refresh() async throws(KeyAuthError) -> JWKSet {
        if let inFlight { return try await inFlight.value.get() }
        let task = Task { await self.fetch() }
        inFlight = task
        let result = await task.value
        inFlight = nil
        return try result.get()
    }

    private func fetch() async -> Result<JWKSet, KeyAuthError> {
        let now = clock.seconds
        lastAttempt = now
        do throws(KeyAuthError) {
            let uri = try await discoveredJWKSURI()
            let document = try await fetcher.fetch(uri)
            let set = try JWKSet(json: document.body)
            let maxAge = Self.maxAge(document.cacheControl)
            cached = Cached(set: set, fetchedAt: now, freshUntil: now.addingSaturating(maxAge))
            lastFailure = nil
            return .success(set)
        } catch {
            // Discovery again next time: the JWKS may have moved.
            jwksURI = nil
            if let cached, now < cached.fetchedAt.addingSaturating(Self.hardLimit) { return .success(cached.set) }
            let failure = KeyAuthError(
                .keySetUnavailable,
                "cannot fetch the JWK set of \(issuer) (\(error.message))"
                    + (cached == nil ? "" : " and the cached copy is older than \(Self.hardLimit / 3600) hours"),
                underlying: error)
            lastFailure = failure
            return .failure(failure)
        }
    }

    /// The `jwks_uri` of the issuer's discovery document, which must name the issuer.
    private func discoveredJWKSURI() async throws(KeyAuthError) -> String {
        if let jwksURI { return jwksURI }
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        let document = try await fetcher.fetch(base + "/.well-known/openid-configuration")
        guard let object = try? JSONValue(parsing: document.body), let named = object["issuer"]?.stringValue else {
            throw KeyAuthError(.serverRejected, "the discovery document of \(issuer) has no issuer")
        }
        guard named == issuer else {
            throw KeyAuthError(.serverRejected, "the discovery document of \(issuer) names another issuer")
        }
        guard let uri = object["jwks_uri"]?.stringValue else {
            throw KeyAuthError(.serverRejected, "the discovery document of \(issuer) has no jwks_uri")
        }
        do {
            _ = try KeyAuthClient.normalizedServerURL(uri, allowInsecureHTTP: allowInsecureHTTP)
        } catch {
            throw KeyAuthError(.serverRejected, "the jwks_uri of \(issuer) is not acceptable: \(error.message)")
        }
        jwksURI = uri
        return uri
    }

    /// `max-age` of a `Cache-Control` value, bounded; the default without one. `no-store` or
    /// `no-cache` anywhere in the value means the shortest time, whatever `max-age` says.
    static func maxAge(_ cacheControl: String?) -> Int64 {
        var seconds = defaultMaxAge
        for directive in (cacheControl ?? "").split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { $0.trimmingSpaces().lowercased() }
            if parts.first == "no-store" || parts.first == "no-cache" { return minimumMaxAge }
            if parts.count == 2, parts[0] == "max-age", let value = Int64(parts[1]) { seconds = value }
        }
        return min(max(seconds, minimumMaxAge), maximumMaxAge)
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> String { String(self).trimmingSpaces() }
}
