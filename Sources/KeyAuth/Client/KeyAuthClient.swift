import Foundation
import Synchronization

/// Talks to a keyauth server (PROTOCOL.md section 4): registration, login with the JWT bearer
/// grant, device management and discovery.
///
/// Every failure is a ``KeyAuthError``: the server's RFC 6749 errors as `.serverRejected` with an
/// ``OAuthError`` underneath (`authorization_pending` as `.approvalPending`, so that the
/// ``Authenticator`` polls), and an unreachable or silent server as `.transportFailed`. No
/// message ever holds a token, an assertion or a key: only the server's base URL and the
/// server's own (sanitized) description.
public struct KeyAuthClient: Sendable {
    /// The server's base URL, without a trailing slash.
    public let serverURL: String
    /// Seconds a request may take, connection included.
    public var timeout: TimeInterval { exchange.timeout }
    /// The transport of this client and its copies (``HTTPExchange``).
    let exchange: HTTPExchange
    /// The time source that turns `expires_in` into an expiry.
    let clock: KeyAuthClock
    /// What the client learned of the server's DPoP support and its last nonce.
    let dpopState = DPoPState()

    /// Whether a login binds its token to the device key with a DPoP proof (RFC 9449).
    public enum DPoPPolicy: Sendable, Equatable {
        /// When the server lists `dpop_signing_alg_values_supported`: a copied token is then
        /// useless without the key (the default).
        case whenSupported
        /// Only when the server requires it (`dpop_bound_access_tokens_required`): a Bearer token
        /// for scripts that send it with `curl -H "Authorization: Bearer ..."`.
        case whenRequired
        /// Never: Bearer tokens only.
        case never
    }

    /// Creates a client.
    ///
    /// - Parameters:
    ///   - serverURL: `https` with a host, optionally a path prefix; `http` only for a loopback
    ///     host (`127.0.0.0/8`, `::1`, `localhost`) unless `allowInsecureHTTP` is true.
    ///   - timeout: seconds a request may take before it fails with `.transportFailed`; a slow
    ///     server must not hang a login forever.
    ///   - allowInsecureHTTP: accept plain `http` to any host. Access tokens are bearer tokens:
    ///     anyone on the path can read one and use it until it expires.
    ///   - clock: the time source that turns `expires_in` into ``AccessToken/expiresAt``.
    /// - Throws: `.invalidArgument` for a URL that is not http(s) with a host, that carries a
    ///   query, a fragment or credentials (they would leak into logs and proxies), or that is
    ///   plain http to a host other than loopback without `allowInsecureHTTP`.
    public init(
        serverURL: String, timeout: TimeInterval = 10, allowInsecureHTTP: Bool = false, clock: KeyAuthClock = .system
    ) throws(KeyAuthError) {
        self.serverURL = try Self.normalizedServerURL(serverURL, allowInsecureHTTP: allowInsecureHTTP)
        self.exchange = HTTPExchange(timeout: timeout)
        self.clock = clock
    }

    /// Checks a server URL and removes trailing slashes, so that it can serve as the fallback
    /// issuer and as a prefix for endpoint paths.
    ///
    /// - Parameters:
    ///   - text: the URL as the person gave it.
    ///   - allowInsecureHTTP: accept `http://` to a host that is not loopback.
    /// - Throws: `.invalidArgument`, as ``init(serverURL:timeout:allowInsecureHTTP:clock:)``; the
    ///   message for plain http names `--insecure-http`, the command's way to allow it.
    public static func normalizedServerURL(_ text: String, allowInsecureHTTP: Bool = false) throws(KeyAuthError)
        -> String
    {
        var trimmed = Substring(text)
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let components = URLComponents(string: String(trimmed)),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.host, !host.isEmpty
        else {
            let suggestion = schemeAdded(to: String(trimmed)).map { "; did you mean \($0)?" } ?? ""
            throw KeyAuthError(
                .invalidArgument, "the server URL must be http:// or https:// with a host name" + suggestion)
        }
        guard components.query == nil, components.fragment == nil, components.user == nil,
            components.password == nil
        else {
            throw KeyAuthError(.invalidArgument, "the server URL must not have a query, a fragment or credentials")
        }
        if scheme == "http", !allowInsecureHTTP, !isLoopbackHost(host) {
            throw KeyAuthError(
                .invalidArgument,
                "the server URL uses plain http:// to \(host), which is not loopback: access tokens would cross "
                    + "the network readable by anyone on the path; use https://, or pass --insecure-http "
                    + "to accept that risk")
        }
        return String(trimmed)
    }

    /// `text` with the scheme it most likely lacks, when it reads as `HOST:PORT` or as a host
    /// name with a dot (`127.0.0.1:8080`, `auth.example.com`): `http://` for a loopback host,
    /// whose server is often plain http, `https://` otherwise. Nil when it has a scheme already,
    /// or reads as neither (`alice`).
    static func schemeAdded(to text: String) -> String? {
        guard !text.contains("://"), let first = text.first, first.isLetter || first.isNumber || first == "["
        else { return nil }
        guard let components = URLComponents(string: "http://" + text), let host = components.host, !host.isEmpty,
            components.port != nil || host.contains(".") || isLoopbackHost(host),
            components.user == nil, components.query == nil, components.fragment == nil
        else { return nil }
        return (isLoopbackHost(host) ? "http://" : "https://") + text
    }

    /// Whether `host` is this machine: `localhost`, an IPv4 address in `127.0.0.0/8`, or `::1`
    /// (with or without brackets).
    ///
    /// Only literal addresses and the name `localhost` count; another name that resolves to
    /// loopback today may resolve elsewhere tomorrow.
    public static func isLoopbackHost(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if name == "localhost" { return true }
        var ipv4 = in_addr()
        if inet_pton(AF_INET, name, &ipv4) == 1 {
            return UInt32(bigEndian: ipv4.s_addr) >> 24 == 127
        }
        var ipv6 = in6_addr()
        guard inet_pton(AF_INET6, name, &ipv6) == 1 else { return false }
        return withUnsafeBytes(of: &ipv6) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
    }

    /// Reads `/.well-known/openid-configuration` for the issuer and endpoints, and checks that the
    /// issuer is the server at ``serverURL``: the same scheme, host and port (loopback names of
    /// one port count as one server), since the issuer is the audience of what the device signs.
    ///
    /// A wrong `--server` (a web site, a typo in the port, another OAuth server) is the usual
    /// cause of a failed discovery, so its error names the URL tried and says so.
    /// - Throws: `.transportFailed`; `.serverRejected` for an error answer, a document without
    ///   an `issuer`, or one that names another server. Its ``KeyAuthError/oauthError`` is the
    ///   answer's, except for a refusal (`invalid_grant`, `access_denied`: a 401 or 403 for the
    ///   public document): none then, as no login was refused.
    public func discover() async throws(KeyAuthError) -> ServerMetadata {
        let metadata = try await discoveryDocument()
        // The issuer is the audience of everything the device key signs for this server: one of
        // another server would have this device sign assertions that whoever answers here (a
        // mistyped host name) passes on to that server within their lifetime.
        guard Self.isSameServer(issuer: metadata.issuer, serverURL: serverURL) else {
            throw KeyAuthError(
                .serverRejected,
                "\(serverURL) names another server as its issuer (\(metadata.issuer)): what this device signs "
                    + "would be addressed to that server, so whoever answers here could pass it on. Use the "
                    + "server's own address (--server \(metadata.issuer)), or correct the server's --issuer")
        }
        return metadata
    }

    /// Whether `issuer` names the server reached at `serverURL`: the same scheme, host (ignoring
    /// case) and port (the scheme's default filled in); two loopback names (`localhost`,
    /// `127.0.0.1`, `[::1]`) with the same scheme and port are one machine's server. The paths
    /// may differ (a server under a prefix of its proxy).
    package static func isSameServer(issuer: String, serverURL: String) -> Bool {
        func origin(_ url: String) -> (scheme: String, host: String, port: Int)? {
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
                let host = components.host?.lowercased(), !host.isEmpty
            else { return nil }
            let defaultPort = scheme == "https" ? 443 : scheme == "http" ? 80 : nil
            guard let port = components.port ?? defaultPort else { return nil }
            return (scheme, host, port)
        }
        guard let named = origin(issuer), let reached = origin(serverURL), named.scheme == reached.scheme,
            named.port == reached.port
        else { return false }
        return named.host == reached.host || (isLoopbackHost(named.host) && isLoopbackHost(reached.host))
    }

    /// The discovery document as the server answers it, its issuer not yet compared.
    private func discoveryDocument() async throws(KeyAuthError) -> ServerMetadata {
        let path = "/.well-known/openid-configuration"
        do {
            let reply = try await send("GET", path)
            let object = try expectObject(reply, success: [200], operation: "discovery")
            return try read(object, "the discovery document", ServerMetadata.init(jsonValue:))
        } catch {
            guard error.code == .serverRejected else { throw error }
            let hint = Self.origin(ofPathURL: serverURL).map { "; did you mean \($0)?" } ?? ""
            // The document is public: a 401 or 403 for it (a site behind a login) says this is
            // not a keyauth server, not that a login was refused; a 429 or 503 stays what it is.
            let refusedLogin = error.oauthError.map { OAuthError.Code.loginRefusals.contains($0.error) } ?? false
            throw KeyAuthError(
                .serverRejected,
                "\(serverURL) does not look like a keyauth server: GET \(serverURL + path) failed (\(error.message))"
                    + hint,
                underlying: refusedLogin ? nil : error.underlying ?? error)
        }
    }

    /// The origin of `url` (`http://127.0.0.1:8080`) when it has a path (`/account`, the page
    /// the README opens in a browser): a keyauth server is named by its origin, so a failed
    /// discovery under a path suggests the origin, without asking the server again. Nil for a
    /// URL without a path.
    package static func origin(ofPathURL url: String) -> String? {
        guard let components = URLComponents(string: url), !components.path.isEmpty, components.path != "/",
            let scheme = components.scheme, let host = components.percentEncodedHost
        else { return nil }
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(bracketed)" + (components.port.map { ":\($0)" } ?? "")
    }

    /// The version sent as `User-Agent`, also printed by `keyauth --version`.
    public static let version = "0.1.0"
}

/// What a client learned of its server's DPoP support, and the server's last nonce: shared by
/// copies of the client, so that a nonce learned at login serves the requests after it.
final class DPoPState: Sendable {
    private struct State {
        var metadata: ServerMetadata??
        var nonce: String?
    }

    private let state = Mutex(State())

    /// The discovery document once read (`.some(nil)`: read and not usable).
    var metadata: ServerMetadata?? {
        get { state.withLock { $0.metadata } }
        set { state.withLock { $0.metadata = newValue } }
    }

    /// The last `DPoP-Nonce` the server sent.
    var nonce: String? {
        get { state.withLock { $0.nonce } }
        set { state.withLock { $0.nonce = newValue } }
    }
}
