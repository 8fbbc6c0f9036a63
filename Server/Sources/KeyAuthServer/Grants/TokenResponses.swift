import KeyAuth

/// The token endpoint's answers (RFC 6749 section 5.1), shared by the grants: never cached,
/// with a fresh `DPoP-Nonce` when nonces are on.
extension HTTPResponse {
    /// `{"access_token":...,"expires_in":...,"token_type":"Bearer"|"DPoP"}`, with
    /// `offline_grant` after a host login, never cached; with a fresh `DPoP-Nonce` when nonces
    /// are on.
    static func tokenResponse(_ result: LoginResult, nonce: String?) -> HTTPResponse {
        var headers: HTTPHeaders = ["Cache-Control": "no-store", "Pragma": "no-cache"]
        if let nonce { headers.set("DPoP-Nonce", nonce) }
        return .json(
            serialized: TokenResponse(
                accessToken: result.accessToken, expiresIn: result.expiresIn, tokenType: result.tokenType,
                offlineGrant: result.offlineGrant
            ).jsonBytes, headers: headers)
    }

    /// The code grant's answer (OpenID Connect Core section 3.1.3.3), and the CIBA grant's for
    /// `openid`: `access_token`, `token_type` (Bearer, or DPoP for a bound token), `expires_in`,
    /// `id_token` and `scope`; no refresh token. Never cached; with a fresh `DPoP-Nonce` when
    /// nonces are on.
    static func authorizationCodeResponse(_ grant: AuthorizationGrant, nonce: String?) -> HTTPResponse {
        var headers: HTTPHeaders = ["Cache-Control": "no-store", "Pragma": "no-cache"]
        if let nonce { headers.set("DPoP-Nonce", nonce) }
        return .json(
            .object([
                "access_token": .string(grant.accessToken), "token_type": .string(grant.tokenType),
                "expires_in": .integer(grant.expiresIn), "id_token": .string(grant.idToken),
                "scope": .string(grant.scope),
            ]),
            headers: headers)
    }

    /// The CIBA grant's answer (PROTOCOL.md section 8): section 4's token response, or with an ID
    /// token (scope `openid`) the code grant's, as CIBA Core 1.0 section 10.1.1 has it.
    static func signInGrantResponse(_ grant: SignInGrant) -> HTTPResponse {
        guard let idToken = grant.idToken else {
            return tokenResponse(
                LoginResult(
                    accessToken: grant.accessToken, expiresIn: grant.expiresIn, tokenType: TokenResponse.bearer,
                    user: nil, deviceKID: nil),
                nonce: nil)
        }
        return authorizationCodeResponse(
            AuthorizationGrant(
                accessToken: grant.accessToken, idToken: idToken, expiresIn: grant.expiresIn,
                tokenType: TokenResponse.bearer, scope: grant.scope ?? "openid"),
            nonce: nil)
    }
}
