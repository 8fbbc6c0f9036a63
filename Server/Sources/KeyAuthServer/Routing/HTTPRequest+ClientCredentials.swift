import KeyAuth

extension HTTPRequest {
    /// The client's credentials, from `Authorization: Basic` (RFC 6749 section 2.3.1: the id and
    /// the secret each form-encoded, joined by a colon, in base64) or from `client_id` and
    /// `client_secret` in the form body; nil when the request carries neither.
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` when both ways are used at once (RFC 6749
    ///   allows one method per request); `.invalidClient` for a Basic header that does not decode.
    func clientCredentials(form: [String: String]) throws(ServiceError) -> ClientCredentials? {
        let inBody = form["client_id"] != nil || form["client_secret"] != nil
        guard let header = headers["Authorization"] else {
            guard let id = form["client_id"], let secret = form["client_secret"], !id.isEmpty, !secret.isEmpty else {
                return nil
            }
            return ClientCredentials(id: id, secret: secret)
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "basic" else {
            throw ServiceError(.invalidClient, "client authentication failed")
        }
        guard !inBody else {
            throw ServiceError(.invalidRequest, "use one client authentication method, not two")
        }
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
        return ClientCredentials(id: id, secret: secret)
    }

    /// The form body of `application/x-www-form-urlencoded` endpoints.
    ///
    /// - Throws: `.invalidRequest` for another content type or a body that does not decode.
    func formBody() throws(ServiceError) -> [String: String] {
        try requireContentType("application/x-www-form-urlencoded")
        do {
            return try FormURLEncoding.decode(body)
        } catch {
            throw ServiceError(.invalidRequest, error.message)
        }
    }
}
