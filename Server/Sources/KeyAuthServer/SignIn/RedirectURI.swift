import KeyAuth

/// The rules for a client's redirect URIs (PROTOCOL.md section 10): what may be registered, and
/// which URI of a request matches a registered one.
///
/// A redirect URI is where the server sends a browser with an authorization code, so a loose
/// rule is an open redirect that leaks codes: registration takes only absolute `https` URIs (or
/// `http` to a loopback host, which never leaves the machine) without a fragment, and matching
/// is byte for byte. The one exception is RFC 8252 section 7.3: a native app listens on a port
/// it picks at run time, so a public client's registered `http://127.0.0.1/...` or
/// `http://[::1]/...` matches the same URI on any port.
enum RedirectURI {
    /// The longest URI accepted, in bytes.
    static let maximumLength = 2000

    /// The parts of an absolute URI that the rules look at.
    struct Parts: Equatable {
        var scheme: String
        /// The host as written, lower-cased; IPv6 literals keep their brackets.
        var host: String
        /// The port as written, nil without one.
        var port: String?
        /// Everything from the first `/`, `?` after the authority on.
        var rest: String
    }

    /// Splits `uri` into scheme, host, port and the rest; nil when it is not absolute with an
    /// authority, has user information, a fragment, spaces or control characters.
    static func parts(of uri: String) -> Parts? {
        guard !uri.isEmpty, uri.utf8.count <= maximumLength, !uri.contains("#"),
            uri.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7f })
        else { return nil }
        guard let separator = uri.firstRange(of: "://") else { return nil }
        let scheme = uri[..<separator.lowerBound].lowercased()
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }) else {
            return nil
        }
        let afterScheme = uri[separator.upperBound...]
        let authorityEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" } ?? afterScheme.endIndex
        let authority = afterScheme[..<authorityEnd]
        guard !authority.isEmpty, !authority.contains("@") else { return nil }
        var host: Substring
        var port: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[...close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                port = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            port = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { return nil }
        if let port, port.isEmpty || port.count > 5 || !port.allSatisfy({ $0.isASCII && $0.isNumber }) {
            return nil
        }
        return Parts(
            scheme: scheme, host: host.lowercased(), port: port.map(String.init),
            rest: String(afterScheme[authorityEnd...]))
    }

    /// Whether `host` names the machine itself: `127.0.0.1`, `[::1]` or `localhost`.
    static func isLoopback(_ host: String) -> Bool {
        host == "127.0.0.1" || host == "[::1]" || host == "localhost"
    }

    /// Why `uri` cannot be registered as a redirect URI, or nil when it can.
    static func problem(with uri: String) -> String? {
        guard let parts = parts(of: uri) else {
            return "a redirect URI must be absolute (scheme://host/path), without a fragment, user or spaces"
        }
        switch parts.scheme {
        case "https": return nil
        case "http" where isLoopback(parts.host): return nil
        default: return "a redirect URI must be https, or http only to 127.0.0.1, [::1] or localhost"
        }
    }

    /// Whether the redirect URI of a request, `presented`, matches the registered `registered`:
    /// byte for byte, or for a public client's loopback IP registration the same URI on any port
    /// (RFC 8252 section 7.3; not `localhost`, which section 8.3 advises against).
    static func matches(_ presented: String, registered: String, isPublicClient: Bool) -> Bool {
        if presented.isSameBytes(as: registered) { return true }
        guard isPublicClient, registered.hasPrefix("http://"), let want = parts(of: registered),
            want.host == "127.0.0.1" || want.host == "[::1]", let got = parts(of: presented)
        else { return false }
        // Everything but the port byte for byte: the same text with the presented port put in.
        return presented.isSameBytes(as: "http://" + want.host + (got.port.map { ":" + $0 } ?? "") + want.rest)
    }

    /// `scheme://host[:port]` of `uri`, for a `form-action` source; nil when it does not parse.
    static func origin(of uri: String) -> String? {
        guard let parts = parts(of: uri) else { return nil }
        return parts.scheme + "://" + parts.host + (parts.port.map { ":" + $0 } ?? "")
    }

    /// `uri` with `parameters` added to its query, each form-encoded: how the authorization
    /// response and the logout's `state` go back to a client.
    static func adding(_ parameters: [(String, String)], to uri: String) -> String {
        let query = parameters.map { FormURLEncoding.encode($0.0) + "=" + FormURLEncoding.encode($0.1) }
            .joined(separator: "&")
        let separator = uri.contains("?") ? (uri.hasSuffix("?") || uri.hasSuffix("&") ? "" : "&") : "?"
        return uri + separator + query
    }

    /// The host a device shows for the redirect ("wiki.example.org"), as lower-cased in the URI;
    /// with its port for a loopback host ("127.0.0.1:40000"), where only the port tells the
    /// program the code goes to from any other program on the user's machine (RFC 8252 section
    /// 8.6).
    static func host(of uri: String) -> String {
        guard let parts = parts(of: uri) else { return "an unknown host" }
        guard isLoopback(parts.host), let port = parts.port else { return parts.host }
        return parts.host + ":" + port
    }
}
