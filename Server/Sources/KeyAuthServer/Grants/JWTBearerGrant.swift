import KeyAuth

/// A device logs in with its signed assertion (RFC 7523 section 2.1; PROTOCOL.md section 4,
/// "Log in"): the device's key is the credential, so no client authenticates, and a DPoP proof
/// of the same key binds the token to it.
final class JWTBearerGrant: TokenGrantHandler {
    let service: KeyAuthService

    init(service: KeyAuthService) {
        self.service = service
    }

    var grantType: OAuthGrantType { .jwtBearer }
    var requiredParameters: [String] { ["assertion"] }
    var clientAuthentication: TokenClientAuthentication { .none }
    var acceptsDPoP: Bool { true }

    func record(_ result: String, in metrics: ServerMetrics) {
        metrics.recordLogin(result: result)
    }

    func grant(_ request: TokenGrantRequest) throws -> TokenGrantOutcome {
        let result = try service.login(assertion: request.required("assertion"), proof: request.proof)
        return TokenGrantOutcome(
            response: .tokenResponse(result, nonce: service.freshNonce()), result: "success", user: result.user,
            deviceKID: result.deviceKID)
    }
}
