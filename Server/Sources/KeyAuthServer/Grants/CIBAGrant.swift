import KeyAuth

/// A client application collects the answer to its sign-in request (CIBA Core 1.0 section
/// 10.1; PROTOCOL.md section 8): a confidential client polls with its `auth_req_id` until a
/// device of the user answers.
///
/// Its expected answers (pending, too fast, denied, expired) are not failures of the address,
/// so an application signing many users in is not locked out; an unknown `auth_req_id` or a
/// failed client authentication are.
final class CIBAGrant: TokenGrantHandler {
    let service: KeyAuthService

    init(service: KeyAuthService) {
        self.service = service
    }

    /// The answers a poll gets by design.
    private static let pollAnswers: [ServiceError.Kind] = [
        .authorizationPending, .pollTooFast, .deviceDenied, .expiredToken,
    ]

    var grantType: OAuthGrantType { .ciba }
    var requiredParameters: [String] { ["auth_req_id"] }
    var clientAuthentication: TokenClientAuthentication { .confidential }
    var acceptsDPoP: Bool { false }

    func countsAsFailure(_ kind: ServiceError.Kind) -> Bool { !Self.pollAnswers.contains(kind) }

    func record(_ result: String, in metrics: ServerMetrics) {
        metrics.recordSignInRequest(result: "poll_" + result)
    }

    func grant(_ request: TokenGrantRequest) throws -> TokenGrantOutcome {
        guard let client = request.client else { throw ServiceError(.invalidClient, "client authentication failed") }
        let grant = try service.collectSignIn(authReqID: request.required("auth_req_id"), client: client)
        return TokenGrantOutcome(
            response: .signInGrantResponse(grant), result: "issued", user: grant.user, deviceKID: grant.deviceKID)
    }
}
