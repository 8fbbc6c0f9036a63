import KeyAuth

/// `GET` or `POST /userinfo` (OpenID Connect Core section 5.3; PROTOCOL.md section 10): the user
/// an access token issued to a client names.
///
/// Errors are RFC 6750 section 3's: no token gives a bare `Bearer` challenge, a bad one
/// `invalid_token`, one without the `openid` scope `insufficient_scope` (403).
struct UserInfoEndpoint: Sendable {
    static let path = "/userinfo"

    let provider: OpenIDProvider

    /// Answers the request; `caller` learns the user and client of a valid token.
    func respond(to request: HTTPRequest, caller: inout KeyAuthResponder.Caller) throws -> HTTPResponse {
        let header = try request.authorization()
        var presented = header.flatMap { try? AccessTokenRules.credentials(fromAuthorization: $0) }
        // A POST with a body must be a form that decodes, its parameters unrepeated: a body read
        // leniently (a repeated access_token, a zero byte, another content type) would let the
        // header's token answer where a proxy in front judged the form's.
        let form = request.method == "POST" && !request.body.isEmpty ? try request.formBody() : [:]
        if let token = form["access_token"] {
            // RFC 6750 section 2.2: the token in the form body, as the request's one way of
            // presenting a token (section 3.1): with another in the header, which one the
            // request means is a guess, and a proxy in front may have checked the other. A
            // header this server cannot read counts too: a proxy may read it as a token.
            guard header == nil else {
                throw ServiceError(
                    .invalidRequest, "the request presents an access token both in Authorization and in the form")
            }
            presented = (scheme: .bearer, token: token)
        }
        guard let presented, !presented.token.isEmpty else {
            var response = HTTPResponse(status: 401, headers: ["Cache-Control": "no-store"])
            response.headers.setChallenge(.bearer(realm: "keyauth"))
            return response
        }
        let claims: AccessTokenClaims
        do {
            claims = try provider.userInfo(
                token: presented.token, scheme: presented.scheme, proof: try request.dpopProof(atResource: true),
                method: request.method, path: request.path)
        } catch let error as ServiceError {
            var response = HTTPResponse(error: error)
            if error.kind == .invalidToken {
                response.headers.setChallenge(
                    .bearer(realm: "keyauth", error: .invalidToken, description: error.description))
            }
            return response
        }
        // A valid token of a registered client, presented as it must be: its user and client.
        caller.user = claims.user
        caller.clientID = claims.clientID
        guard claims.scopes.contains("openid") else {
            var response = HTTPResponse.json(
                .object([
                    "error": .string(OAuthError.Code.insufficientScope.rawValue),
                    "error_description": "the access token lacks the openid scope",
                ]),
                status: 403)
            response.headers.setChallenge(.bearer(realm: "keyauth", error: .insufficientScope, scope: "openid"))
            return response
        }
        return .json(
            .object(["sub": .string(claims.user), "preferred_username": .string(claims.user)]),
            headers: ["Cache-Control": "no-store", "Pragma": "no-cache"])
    }
}
