import KeyAuth

extension HTTPRequest {
    /// The client's credentials, from `Authorization: Basic` (RFC 6749 section 2.3.1: the id and
    /// the secret each form-encoded, joined by a colon, in base64) or from `client_id` and
    /// `client_secret` in the form body; nil when the request carries neither.
    ///
    /// A `client_id` in the body beside a Basic header is not a second method when it names the
    /// same client: RFC 6749 section 4.1.3 has the parameter identify the client, and common
    /// client libraries send it with `client_secret_basic` too.
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` when both ways are used at once (a
    ///   `client_secret` in the body, or a `client_id` there naming another client: RFC 6749
    ///   allows one method per request), or for two `Authorization` headers (two clients' at
    ///   once name no one client); `.invalidClient` for a Basic header that does not decode.
    func clientCredentials(form: [String: String]) throws(ServiceError) -> ClientCredentials? {
        guard let header = try authorization() else {
            guard let id = form["client_id"], let secret = form["client_secret"], !id.isEmpty, !secret.isEmpty else {
                return nil
            }
            return ClientCredentials(id: id, secret: secret)
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "basic" else {
            throw ServiceError(.invalidClient, "client authentication failed")
        }
        let twoMethods = ServiceError(.invalidRequest, "use one client authentication method, not two")
        guard form["client_secret"] == nil else { throw twoMethods }
        let standard = parts[1].trimmingWhitespace()
        let urlAlphabet = String(
            standard.compactMap { character -> Character? in
                switch character {
                case "+": "-"
                case "/": "_"
                case "=": nil
                default: character
                }
            })
        guard let decoded = Base64URL.decode(urlAlphabet), let colon = decoded.firstIndex(of: UInt8(ascii: ":")),
            let id = try? FormURLEncoding.decodeComponent(decoded[..<colon]),
            let secret = try? FormURLEncoding.decodeComponent(decoded[(colon + 1)...]), !id.isEmpty, !secret.isEmpty
        else { throw ServiceError(.invalidClient, "client authentication failed") }
        if let named = form["client_id"], named != id { throw twoMethods }
        return ClientCredentials(id: id, secret: secret)
    }

    /// The form body of `application/x-www-form-urlencoded` endpoints.
    ///
    /// - Throws: `.invalidRequest` for another content type, a body that does not decode, or a
    ///   repeated parameter (RFC 6749 sections 3.1 and 3.2).
    func formBody() throws(ServiceError) -> [String: String] {
        let (values, repeated) = try formParameters()
        if let name = repeated.min() {
            throw ServiceError(.invalidRequest, FormURLEncoding.repeatedParameterMessage(name))
        }
        return values
    }

    /// The form body with the names that came more than once, for the authorization endpoint,
    /// which answers a repeated parameter as the same one in its query
    /// (``FormURLEncoding/decodeNotingRepeats(_:)``).
    ///
    /// - Throws: `.invalidRequest` for another content type or a body that does not decode.
    func formParameters() throws(ServiceError) -> (values: [String: String], repeated: Set<String>) {
        try requireContentType("application/x-www-form-urlencoded")
        do {
            return try FormURLEncoding.decodeNotingRepeats(body)
        } catch {
            throw ServiceError(.invalidRequest, error.message)
        }
    }
}
