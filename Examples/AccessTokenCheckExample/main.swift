import Foundation
import KeyAuth

/// What a service's HTTP layer hands over for one request.
struct IncomingRequest {
    var method: String
    /// The request line's target: a path, and a query.
    var target: String
    var headers: [String: String]

    func header(_ name: String) -> String? { headers[name] }
}

/// The answer a service gives: a status and the reason, never the token.
func answer(_ request: IncomingRequest, verifier: AccessTokenVerifier) async -> (status: Int, text: String) {
    do {
        // The service's own origin, configured: a proof names it, and only it tells this
        // service's requests from another's (every keyauth token names the issuer as audience).
        let url = try AccessTokenVerifier.requestURL(origin: "https://api.example.com", target: request.target)
        let claims = try await verifier.verify(
            authorization: request.header("Authorization"), dpopProof: request.header("DPoP"),
            method: request.method, url: url)
        return (200, "allowed: \(claims.user) from device \(claims.deviceKeyID), amr \(claims.amr)")
    } catch {
        switch error.code {
        case .invalidArgument: return (400, "refused: \(error.message)")  // a target that is not a path
        case .keySetUnavailable: return (503, "the issuer's keys cannot be had: \(error.message)")
        // A valid token of a device below the verifier's requirement (RFC 9470's error).
        case .insufficientUserAuthentication: return (401, "needs a hardware key: \(error.message)")
        default: return (401, "refused: \(error.message)")  // invalid_token or invalid_dpop_proof
        }
    }
}

// One verifier for the service's lifetime: it caches the issuer's keys and the proofs it saw.
// KEYAUTH_URL names a local server's issuer (http:// only on loopback).
do {
    let issuer = ProcessInfo.processInfo.environment["KEYAUTH_URL"] ?? "https://auth.example.com"
    let verifier = try AccessTokenVerifier(issuer: issuer)
    // Where a key file's token must not do (an admin API), one argument more: only tokens of
    // device keys held by a TPM pass (`.attested`: by a TPM of a maker the server trusts).
    let hardwareOnly = try AccessTokenVerifier(issuer: issuer, requirement: .hardwareKey)
    let request = IncomingRequest(method: "GET", target: "/orders", headers: [:])
    for verifier in [verifier, hardwareOnly] {
        let (status, text) = await answer(request, verifier: verifier)
        print(status, text)  // 401 refused: the request has no Authorization header
    }
} catch {
    print("cannot set up the verifier: \(error.message)")
}
