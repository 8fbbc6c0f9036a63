/// Sign-in by approval as a client application asks for it (PROTOCOL.md section 8, CIBA poll
/// mode): what `keyauth-pam-helper` does for a push login to a host.
extension KeyAuthClient {
    /// A confidential client's `client_id` and `client_secret`, sent as `client_secret_post`.
    package struct ClientSecret: Sendable {
        package let id: String
        package let secret: String

        package init(id: String, secret: String) {
            self.id = id
            self.secret = secret
        }
    }

    /// The server's acknowledgement of a new request.
    package struct BackchannelRequest: Sendable, Equatable {
        /// The `auth_req_id` to poll with.
        package let id: String
        /// Seconds until the request expires.
        package let expiresIn: Int
        /// Seconds to wait between polls.
        package let interval: Int
    }

    /// What one poll learned.
    package enum BackchannelOutcome: Sendable, Equatable {
        /// Not answered yet (`authorization_pending`).
        case pending
        /// Polled too fast (`slow_down`): the interval grew by 5 seconds.
        case slowDown
        /// A device approved it; the token was issued to the client.
        case approved
        /// The user denied it, or the approving device was revoked (`access_denied`).
        case denied(String)
        /// Nobody answered in time (`expired_token`).
        case expired
    }

    /// Asks the server to have `user` approve a sign-in (`POST /bc-authorize`).
    ///
    /// - Parameters:
    ///   - bindingMessage: the code the client shows and the user types on the device.
    ///   - requestedExpiry: seconds the request may wait, within the server's bounds.
    /// - Throws: `.serverRejected` with the server's error (`unknown_user_id`, `access_denied`
    ///   for a user the client may not sign in, `slow_down`, `invalid_client`);
    ///   `.transportFailed`.
    package func startBackchannelSignIn(
        client: ClientSecret, user: String, bindingMessage: String, requestedExpiry: Int? = nil
    ) async throws(KeyAuthError) -> BackchannelRequest {
        var form = FormURLEncoding.encode([
            "client_id": client.id, "client_secret": client.secret, "login_hint": user,
            "binding_message": bindingMessage,
        ])
        if let requestedExpiry { form += "&requested_expiry=\(requestedExpiry)" }
        let reply = try await send(
            "POST", "/bc-authorize", body: Array(form.utf8), contentType: "application/x-www-form-urlencoded")
        let object = try expectObject(reply, success: [200], operation: "sign-in request")
        guard let id = object["auth_req_id"]?.stringValue, InputRules.isValidSignInRequestID(id),
            let expiresIn = object["expires_in"]?.integerValue, (0...86_400).contains(expiresIn),
            let interval = object["interval"]?.integerValue, (1...600).contains(interval)
        else {
            throw KeyAuthError(.serverRejected, "the sign-in request answer of \(serverURL) is malformed")
        }
        return BackchannelRequest(id: id, expiresIn: Int(expiresIn), interval: Int(interval))
    }

    /// Polls the token endpoint once for the answer to request `id` (the CIBA grant).
    ///
    /// - Throws: `.serverRejected` for any other error (`invalid_grant`, `invalid_client`) or an
    ///   approval without an access token; `.transportFailed`.
    package func pollBackchannelSignIn(id: String, client: ClientSecret) async throws(KeyAuthError)
        -> BackchannelOutcome
    {
        let form = FormURLEncoding.encode([
            "grant_type": "urn:openid:params:grant-type:ciba", "auth_req_id": id, "client_id": client.id,
            "client_secret": client.secret,
        ])
        let reply = try await send(
            "POST", "/oauth/token", body: Array(form.utf8), contentType: "application/x-www-form-urlencoded")
        if reply.status == 200 {
            let object = try expectObject(reply, success: [200], operation: "sign-in poll")
            guard object["access_token"]?.stringValue?.isEmpty == false else {
                throw KeyAuthError(.serverRejected, "the sign-in poll answer of \(serverURL) has no access token")
            }
            return .approved
        }
        let oauth = Self.oauthError(in: reply)
        switch oauth.error {
        case .authorizationPending: return .pending
        case .slowDown: return .slowDown
        case .accessDenied: return .denied(oauth.errorDescription ?? "the user denied the sign-in")
        case .expiredToken: return .expired
        default: throw Self.error(for: oauth, operation: "sign-in poll")
        }
    }
}
