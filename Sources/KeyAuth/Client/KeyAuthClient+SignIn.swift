/// Sign-in by approval as a device sees it (PROTOCOL.md section 8): the user's open sign-in
/// requests, and the device's answer to one.
extension KeyAuthClient {
    /// The user's open sign-in requests (`GET /v1/auth-requests`).
    ///
    /// - Parameters:
    ///   - accessToken: the device's access token.
    ///   - proofs: the device key's proof builder, for a DPoP-bound `accessToken`.
    ///   - cursor: the `cursor` of an earlier answer; with `wait`, the server holds the answer
    ///     until a newer request exists.
    ///   - wait: seconds the server may hold the answer, capped below the client's timeout so that
    ///     a long poll never ends as a transport failure.
    /// - Throws: `.serverRejected` with `invalid_token` for an expired or revoked token, and for
    ///   an answer without the protocol's shape; `.transportFailed`.
    package func signInRequests(
        accessToken: AccessToken, proofs: DPoPProofBuilder? = nil, after cursor: String? = nil, wait: Int = 0
    ) async throws(KeyAuthError) -> SignInRequestList {
        var query = ["wait=\(longPollSeconds(wait))"]
        if let cursor { query.append("after=" + FormURLEncoding.encode(cursor)) }
        let reply = try await send(
            "GET", "/v1/auth-requests?" + query.joined(separator: "&"), accessToken: accessToken, proofs: proofs)
        let object = try expectObject(reply, success: [200], operation: "sign-in request list")
        do {
            return try SignInRequestList(jsonValue: .object(object))
        } catch {
            let subject =
                error.isInEntry
                ? "a request in the sign-in request list of \(serverURL)" : "the sign-in request list of \(serverURL)"
            throw KeyAuthError(.serverRejected, "\(subject) \(error.problem)")
        }
    }

    /// The longest wait this client asks for: two seconds under its own timeout, at most the
    /// protocol's 30.
    func longPollSeconds(_ wait: Int) -> Int {
        max(0, min(wait, 30, Int(clampingSeconds: timeout, to: 0...3600) - 2))
    }

    /// Checks the code the user typed for a sign-in request (`POST /v1/auth-requests/{id}/code`),
    /// before the device asks for its PIN to approve: the code is shown only where the sign-in
    /// started (number matching), so only the server can tell whether it is right.
    ///
    /// - Throws: `.invalidArgument` for an id that is not a request id; `.serverRejected` with
    ///   `wrong_code` (the server counted it; the description says how many attempts are left),
    ///   `access_denied` (that was the last attempt: the request is denied), `not_found`,
    ///   `already_answered` or `expired_token`.
    package func checkSignInCode(
        id: String, code: String, accessToken: AccessToken, proofs: DPoPProofBuilder? = nil
    ) async throws(KeyAuthError) {
        guard InputRules.isValidSignInRequestID(id) else {
            throw KeyAuthError(.invalidArgument, "a sign-in request id is 43 characters of base64url (A-Z a-z 0-9 - _)")
        }
        let body = JSONValue.object(["code": .string(code)])
        let reply = try await send(
            "POST", "/v1/auth-requests/" + id + "/code", body: Array(body.serialized().utf8),
            contentType: "application/json", accessToken: accessToken, proofs: proofs)
        _ = try expectObject(reply, success: [200], operation: "code check")
    }

    /// Answers a sign-in request (`POST /v1/auth-requests/{id}`).
    ///
    /// - Parameters:
    ///   - id: the request's id.
    ///   - decision: approve or deny.
    ///   - assertion: for an approval, a fresh device assertion carrying `auth_req_id` (the
    ///     request's id), `amr` and `binding_code` (the code the user typed); ignored for a
    ///     denial.
    ///   - accessToken: the device's access token.
    ///   - proofs: the device key's proof builder, for a DPoP-bound `accessToken`.
    /// - Returns: the status the server recorded.
    /// - Throws: `.invalidArgument` for an id that is not a request id; `.serverRejected` with
    ///   `not_found` (unknown, or another user's), `already_answered`, `expired_token` or
    ///   `invalid_grant` (the assertion was refused).
    @discardableResult
    package func answerSignInRequest(
        id: String, decision: SignInDecision, assertion: String?, accessToken: AccessToken,
        proofs: DPoPProofBuilder? = nil
    ) async throws(KeyAuthError) -> String {
        guard InputRules.isValidSignInRequestID(id) else {
            throw KeyAuthError(.invalidArgument, "a sign-in request id is 43 characters of base64url (A-Z a-z 0-9 - _)")
        }
        var body: [String: JSONValue] = ["decision": .string(decision.rawValue)]
        if decision == .approve, let assertion { body["assertion"] = .string(assertion) }
        let reply = try await send(
            "POST", "/v1/auth-requests/" + id, body: Array(JSONValue.object(body).serialized().utf8),
            contentType: "application/json", accessToken: accessToken, proofs: proofs)
        let object = try expectObject(reply, success: [200], operation: "answer")
        guard object["id"]?.stringValue == id, let status = object["status"]?.stringValue else {
            throw KeyAuthError(.serverRejected, "the answer of \(serverURL) does not name the sign-in request")
        }
        return status
    }
}
