import KeyAuth

/// The authorization request (OpenID Connect Core section 3.1.2.1, RFC 6749 section 4.1.1,
/// RFC 7636): its client and redirect URI first, then every other parameter.
extension OpenIDProvider {
    /// A request whose client and redirect URI are known good: errors from here on go back to
    /// the client.
    struct AuthorizationRequest: Sendable {
        /// The request as it waits for the user, not yet bound to a browser.
        var record: PendingAuthorizationRecord
        var client: ClientRecord
        var prompt: Set<String>
        var maxAge: Int64?

        /// Whether a signed-in user must still allow this sign-in on the consent page: always
        /// for a public client (RFC 8252 section 8.6), and when the client asks with
        /// `prompt=consent`.
        var needsConsent: Bool { client.isPublic || prompt.contains("consent") }
    }

    /// Why a request was refused after its redirect URI was validated: the error the client
    /// gets at its redirect URI (RFC 6749 section 4.1.2.1).
    struct Refusal: Error, Sendable {
        let code: OAuthError.Code
        let description: String
    }

    /// What a request to `/authorize` turned out to be.
    enum AuthorizationCheck: Sendable {
        /// No client and redirect URI to trust: a page says why, and no redirect is safe. The
        /// client, when it was found registered.
        case unsafe(reason: String, client: ClientRecord?)
        /// Refused, to be told to the client at `redirectURI` with the request's `state`.
        case refused(Refusal, client: ClientRecord, redirectURI: String, state: String?)
        case valid(AuthorizationRequest)
    }

    /// Checks an authorization request's parameters.
    ///
    /// `repeated` are the names that came more than once (RFC 6749 section 3.1 forbids it): a
    /// repeated `client_id` or `redirect_uri` leaves no redirect URI to trust; any other is
    /// `invalid_request` at the redirect URI.
    /// - Throws: ``StorageError``.
    func check(_ parameters: [String: String], repeated: Set<String>) throws -> AuthorizationCheck {
        for name in ["client_id", "redirect_uri"] where repeated.contains(name) {
            return .unsafe(reason: "The request repeats \(name); each parameter may appear once.", client: nil)
        }
        guard let clientID = parameters["client_id"], !clientID.isEmpty,
            let client = try client(id: clientID), !client.redirectURIs.isEmpty
        else { return .unsafe(reason: "The application is not registered with this server (client_id).", client: nil) }
        guard let redirectURI = parameters["redirect_uri"],
            client.redirectURIs.contains(where: {
                RedirectURI.matches(redirectURI, registered: $0, isPublicClient: client.isPublic)
            })
        else { return .unsafe(reason: "The redirect_uri is not one registered for \(client.name).", client: client) }
        do {
            if let name = repeated.min() {
                throw Refusal(code: .invalidRequest, description: FormURLEncoding.repeatedParameterMessage(name))
            }
            return .valid(try validate(parameters, client: client, redirectURI: redirectURI))
        } catch let refusal as Refusal {
            // A state over the limit is not sent back: percent-encoded, the 64 KiB a posted form
            // may hold would make a Location header libmicrohttpd drops the connection over.
            let state = parameters["state"].flatMap {
                !repeated.contains("state") && $0.utf8.count <= Self.maximumParameterLength ? $0 : nil
            }
            return .refused(refusal, client: client, redirectURI: redirectURI, state: state)
        }
    }

    /// Every parameter of an authorization request that ``check(_:repeated:)`` reads; the others
    /// are ignored (OpenID Connect Core section 3.1.2.1). A posted request goes on as a GET with
    /// these alone, which keeps its URL short without changing what it asks.
    static let authorizationParameters: Set<String> = [
        "client_id", "redirect_uri", "response_type", "response_mode", "scope", "state", "nonce", "code_challenge",
        "code_challenge_method", "prompt", "max_age", "login_hint", "acr_values", "request", "request_uri",
    ]

    /// The checks after the redirect URI (OpenID Connect Core section 3.1.2.1, RFC 7636).
    private func validate(_ parameters: [String: String], client: ClientRecord, redirectURI: String) throws
        -> AuthorizationRequest
    {
        // Before the user signs in for nothing: a code could only end in a failed token request
        // when no RS256 key can sign the ID token (a --signing-key-file of another algorithm).
        guard canSignIDTokens else {
            throw Refusal(code: .serverError, description: "the server has no RS256 key to sign ID tokens")
        }
        if parameters["request"] != nil {
            throw Refusal(code: .requestNotSupported, description: "request objects are not supported")
        }
        if parameters["request_uri"] != nil {
            throw Refusal(code: .requestURINotSupported, description: "request_uri is not supported")
        }
        guard let responseType = parameters["response_type"], !responseType.isEmpty else {
            throw Refusal(code: .invalidRequest, description: "response_type is missing")
        }
        guard responseType == "code" else {
            throw Refusal(code: .unsupportedResponseType, description: "only response_type=code is supported")
        }
        if let mode = parameters["response_mode"], mode != "query" {
            throw Refusal(code: .invalidRequest, description: "only response_mode=query is supported")
        }
        let scopes = (parameters["scope"] ?? "").split(separator: " ").map(String.init)
        guard scopes.contains("openid") else {
            throw Refusal(code: .invalidScope, description: "scope must contain openid")
        }
        // Scopes this provider does not know are left out of the grant (Core section 3.1.2.1).
        let granted = ["openid", "profile"].filter(scopes.contains).joined(separator: " ")
        guard parameters["code_challenge_method"] == "S256" else {
            throw Refusal(
                code: .invalidRequest, description: "PKCE is required: code_challenge_method must be S256")
        }
        guard let challenge = parameters["code_challenge"], challenge.utf8.count == 43,
            Base64URL.decode(challenge) != nil
        else {
            throw Refusal(
                code: .invalidRequest, description: "code_challenge must be the base64url SHA-256 of the verifier")
        }
        let prompt = Set((parameters["prompt"] ?? "").split(separator: " ").map(String.init))
        guard prompt.isSubset(of: ["login", "consent", "none"]) else {
            throw Refusal(code: .invalidRequest, description: "prompt may be login, consent or none")
        }
        guard !(prompt.contains("none") && prompt.count > 1) else {
            throw Refusal(code: .invalidRequest, description: "prompt=none cannot be combined with another value")
        }
        var maxAge: Int64?
        if let text = parameters["max_age"] {
            guard let value = Int64(text), value >= 0 else {
                throw Refusal(code: .invalidRequest, description: "max_age must be a number of seconds")
            }
            maxAge = value
        }
        for name in ["state", "nonce", "login_hint", "acr_values"]
        where (parameters[name]?.utf8.count ?? 0) > Self.maximumParameterLength {
            throw Refusal(
                code: .invalidRequest, description: "\(name) is longer than \(Self.maximumParameterLength) bytes")
        }
        let hint = parameters["login_hint"].flatMap { InputRules.isValidUser($0) ? $0 : nil }
        // keyauth's classes only (section 10, "Authentication context"); the length was checked.
        let context = RequestedAuthenticationContext(parameter: parameters["acr_values"])
        let record = PendingAuthorizationRecord(
            browserBinding: [], clientID: client.id, redirectURI: redirectURI, scope: granted,
            state: parameters["state"], nonce: parameters["nonce"], codeChallenge: challenge, loginHint: hint,
            expiresAt: now() + Self.pendingLifetime, acrValues: context?.values ?? [], maxAge: maxAge)
        return AuthorizationRequest(record: record, client: client, prompt: prompt, maxAge: maxAge)
    }
}
