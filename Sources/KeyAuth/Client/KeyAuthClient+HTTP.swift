import Foundation

/// The HTTP plumbing under every ``KeyAuthClient`` request: building the request with its
/// `Authorization` and `DPoP` headers, answering a server's `use_dpop_nonce` once, and turning
/// answers into documents or into the library's errors, with messages that name the server but
/// never a token, an assertion or a key.
extension KeyAuthClient {
    /// A resource request with `accessToken`: as Bearer, or for a DPoP token with the DPoP scheme
    /// and a fresh proof of `proofs`' key (again once with the server's nonce when it asks).
    ///
    /// - Throws: `.invalidArgument` for a DPoP token without `proofs`; the request's errors.
    func send(
        _ method: String, _ path: String, body: [UInt8]? = nil, contentType: String? = nil, accessToken: AccessToken,
        proofs: DPoPProofBuilder?
    ) async throws(KeyAuthError) -> HTTPExchange.Reply {
        guard accessToken.tokenType == TokenResponse.dpop else {
            return try await send(
                method, path, body: body, contentType: contentType, authorization: "Bearer " + accessToken.value)
        }
        guard let proofs else {
            throw KeyAuthError(.invalidArgument, "a DPoP-bound access token needs the device key to sign a proof")
        }
        return try await sendRetryingNonce(proofs: proofs) { (proof) throws(KeyAuthError) in
            try await send(
                method, path, body: body, contentType: contentType, authorization: "DPoP " + accessToken.value,
                proof: proof, proofAccessToken: accessToken.value)
        }
    }

    /// Sends with a proof from `proofs` (none when nil), and once more with a new proof when the
    /// server answers `use_dpop_nonce` with a `DPoP-Nonce`; remembers the server's last nonce.
    func sendRetryingNonce(
        proofs: DPoPProofBuilder?, _ attempt: (DPoPAttempt?) async throws(KeyAuthError) -> HTTPExchange.Reply
    ) async throws(KeyAuthError) -> HTTPExchange.Reply {
        guard let proofs else { return try await attempt(nil) }
        var reply = try await attempt(DPoPAttempt(builder: proofs, nonce: dpopState.nonce))
        if let nonce = reply.headers["dpop-nonce"] {
            let retry = Self.oauthError(in: reply).error == .useDPoPNonce && nonce != dpopState.nonce
            dpopState.nonce = nonce
            if retry { reply = try await attempt(DPoPAttempt(builder: proofs, nonce: nonce)) }
            if let next = reply.headers["dpop-nonce"] { dpopState.nonce = next }
        }
        return reply
    }

    /// One proof to sign for a request: the builder and the nonce to put in it.
    struct DPoPAttempt {
        let builder: DPoPProofBuilder
        let nonce: String?
    }

    /// Sends one request to `path` under the server URL, with a fresh proof when `proof` is given.
    func send(
        _ method: String, _ path: String, body: [UInt8]? = nil, contentType: String? = nil,
        authorization: String? = nil, proof: DPoPAttempt? = nil, proofAccessToken: String? = nil
    ) async throws(KeyAuthError) -> HTTPExchange.Reply {
        guard URL(string: serverURL + path) != nil else {
            throw KeyAuthError(.invalidArgument, "cannot form a request URL from \(serverURL)")
        }
        var request = HTTPRequestSpec(method: method, url: serverURL + path)
        request.setHeader("Accept", "application/json")
        request.setHeader("User-Agent", "keyauth/\(KeyAuthClient.version)")
        if let contentType { request.setHeader("Content-Type", contentType) }
        if let authorization { request.setHeader("Authorization", authorization) }
        if let proof {
            let signed = try proof.builder.proof(
                method: method, url: serverURL + path, accessToken: proofAccessToken, nonce: proof.nonce)
            request.setHeader("DPoP", signed)
        }
        request.body = body
        return try await exchange.send(request, server: serverURL)
    }

    /// The answer's JSON object, after ``expectSuccess(_:success:operation:)``.
    ///
    /// - Throws: the server's error for a status outside `success`; `.serverRejected` for a body
    ///   that is not a JSON object.
    func expectObject(
        _ reply: HTTPExchange.Reply, success: Set<Int>, operation: String
    ) throws(KeyAuthError) -> [String: JSONValue] {
        try expectSuccess(reply, success: success, operation: operation)
        guard let object = try? JSONValue(parsing: reply.body).objectValue else {
            throw KeyAuthError(.serverRejected, "the \(operation) answer of \(serverURL) is not a JSON object")
        }
        return object
    }

    /// Throws the library's error for the server's answer unless its status is in `success`.
    func expectSuccess(_ reply: HTTPExchange.Reply, success: Set<Int>, operation: String) throws(KeyAuthError) {
        guard !success.contains(reply.status) else { return }
        throw Self.error(for: Self.oauthError(in: reply), operation: operation)
    }

    /// The RFC 6749 error in an answer, or one derived from its status when the body is not one.
    static func oauthError(in reply: HTTPExchange.Reply) -> OAuthError {
        if let object = try? JSONValue(parsing: reply.body).objectValue, let code = object["error"]?.stringValue,
            OAuthError.isWellFormedCode(code)
        {
            return OAuthError(
                error: OAuthError.Code(rawValue: code), errorDescription: object["error_description"]?.stringValue,
                statusCode: reply.status, retryAfter: reply.retryAfter)
        }
        return OAuthError(
            error: OAuthError.code(forStatus: reply.status),
            errorDescription: "HTTP \(reply.status) without an OAuth error body", statusCode: reply.status,
            retryAfter: reply.retryAfter, isFromBody: false)
    }

    /// Turns a server error into the library's error, with a message for people.
    static func error(for oauth: OAuthError, operation: String) -> KeyAuthError {
        let detail = oauth.errorDescription.map { ": \($0)" } ?? ""
        let message: String
        switch oauth.error {
        case .authorizationPending:
            return KeyAuthError(
                .approvalPending, "this device waits for approval by another device of the user", underlying: oauth)
        case .accessDenied where operation == "login":
            message = "the server denied this device (access_denied)\(detail)"
        case .expiredToken:
            message = "the pending registration expired before another device approved it (expired_token)"
        case .invalidGrant:
            message = "the server refused the device key (invalid_grant)\(detail)"
        case .invalidToken:
            message = "the server refused the access token (invalid_token)\(detail)"
        case .slowDown:
            let wait = oauth.retryAfter.map { "try again in \($0) s" } ?? "try again later"
            message = "rate-limited: the server refuses more attempts from this address for now (slow_down); \(wait)"
        case .temporarilyUnavailable:
            let wait = oauth.retryAfter.map { "; retry in \($0) s" } ?? ""
            message = "the server is temporarily unavailable (temporarily_unavailable)\(wait)"
        default:
            message = "the server refused the \(operation) (\(oauth.error.rawValue))\(detail)"
        }
        return KeyAuthError(.serverRejected, message, underlying: oauth, retryAfter: oauth.retryAfter)
    }

    /// Reads a document with a wire type's decoder, naming the server and the document when it
    /// does not have the protocol's shape.
    func read<Value>(
        _ object: [String: JSONValue], _ document: String,
        _ decode: (JSONValue) throws(WireFormatError) -> Value
    ) throws(KeyAuthError) -> Value {
        do {
            return try decode(.object(object))
        } catch {
            throw malformed(error, document: document, operation: "")
        }
    }

    /// The error for an answer without the protocol's shape; a problem in one device entry names
    /// the operation whose answer held it.
    func malformed(_ error: WireFormatError, document: String, operation: String) -> KeyAuthError {
        let subject =
            error.isInEntry ? "a device in the \(operation) answer of \(serverURL)" : "\(document) of \(serverURL)"
        return KeyAuthError(.serverRejected, "\(subject) \(error.problem)")
    }
}
