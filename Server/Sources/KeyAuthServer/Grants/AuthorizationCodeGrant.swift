import KeyAuth

/// A relying party redeems the code the authorization endpoint gave it (RFC 6749 section
/// 4.1.3, OpenID Connect Core section 3.1.3; PROTOCOL.md section 10): a confidential client
/// with its secret or a public one by `client_id` with PKCE; a DPoP proof binds the access
/// token to the proof's key.
final class AuthorizationCodeGrant: TokenGrantHandler {
    let service: KeyAuthService

    init(service: KeyAuthService) {
        self.service = service
    }

    var grantType: OAuthGrantType { .authorizationCode }
    var requiredParameters: [String] { ["code"] }
    var clientAuthentication: TokenClientAuthentication { .confidentialOrPublic }
    var acceptsDPoP: Bool { true }

    func record(_ result: String, in metrics: ServerMetrics) {
        metrics.recordSignInRequest(result: "code_grant_" + result)
    }

    func grant(_ request: TokenGrantRequest) throws -> TokenGrantOutcome {
        guard let client = request.client else { throw ServiceError(.invalidClient, "client authentication failed") }
        let grant = try service.openID.redeemAuthorizationCode(
            request.required("code"), redirectURI: request.form["redirect_uri"],
            verifier: request.form["code_verifier"], client: client, proof: request.proof)
        return TokenGrantOutcome(
            response: .authorizationCodeResponse(grant, nonce: service.freshNonce()), result: "issued",
            user: grant.user, deviceKID: grant.deviceKID)
    }
}
