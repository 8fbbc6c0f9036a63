extension AccessTokenVerifier {
    /// The URL a DPoP proof must name for a request that reached this service: its public
    /// `origin` (configured, never taken from the request's `Host` header) joined with the
    /// request target.
    ///
    /// Every keyauth access token names the issuer as its audience, so every service of the
    /// issuer accepts it, and only the proof's `htu` ties a request to one service. Joining
    /// strings lets a request target that is not a path move the origin: `GET .evil.example/x`
    /// to `https://api.example` would check a proof made for `https://api.example.evil.example/x`,
    /// one that another service received. This refuses such targets, and origins with a path,
    /// a query or credentials, so that the proofs another service got do not pass here.
    ///
    /// ```swift
    /// let url = try AccessTokenVerifier.requestURL(origin: "https://api.example.com", target: request.target)
    /// ```
    ///
    /// - Parameters:
    ///   - origin: `https://host[:port]` (or `http://`), as clients reach the service; a
    ///     trailing `/` is dropped.
    ///   - target: the request line's target in origin form (RFC 9112 section 3.2.1): a path
    ///     beginning with `/`, with an optional query.
    /// - Returns: `origin` followed by `target`.
    /// - Throws: `.invalidArgument` for an origin that is not a scheme and a host, or a target
    ///   that is not a path, or has a fragment, spaces or control characters (answer 400).
    public static func requestURL(origin: String, target: String) throws(KeyAuthError) -> String {
        var trimmed = Substring(origin)
        if trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        let authority: Substring
        if trimmed.hasPrefix("https://") {
            authority = trimmed.dropFirst("https://".count)
        } else if trimmed.hasPrefix("http://") {
            authority = trimmed.dropFirst("http://".count)
        } else {
            throw KeyAuthError(.invalidArgument, "the service's origin must begin with https:// or http://")
        }
        guard !authority.isEmpty, authority.utf8.allSatisfy(isAuthorityByte) else {
            throw KeyAuthError(.invalidArgument, "the service's origin must be a scheme and a host, with no path")
        }
        guard target.utf8.first == UInt8(ascii: "/"), target.utf8.allSatisfy(isTargetByte) else {
            throw KeyAuthError(.invalidArgument, "the request target must be a path beginning with /")
        }
        return String(trimmed) + target
    }

    /// Letters, digits and what a host, an IPv6 literal or a port is written with.
    private static func isAuthorityByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ":"),
            UInt8(ascii: "["), UInt8(ascii: "]"):
            true
        default: false
        }
    }

    /// Visible ASCII but `#`: a target has no fragment, spaces or control characters.
    private static func isTargetByte(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "#")
    }
}
