import KeyAuth

/// The grants the token endpoint accepts.
enum TokenGrant: Sendable, Equatable {
    /// A device logs in.
    case jwtBearer(assertion: String)
    /// A client collects the result of its sign-in request.
    case ciba(authReqID: String, client: ClientCredentials?)
    /// A relying party redeems an authorization code (OpenID Connect): a confidential client
    /// with its credentials, a public one with `client_id` only.
    case authorizationCode(
        code: String, redirectURI: String?, verifier: String?, client: ClientCredentials?, publicClientID: String?)
}

/// Reading what a request carries, in one place for every endpoint: the form body of the token
/// endpoint, the JSON body of registration, the Bearer token and the device list's query.
///
/// Every failure is ``ServiceError`` `.invalidRequest` (`.invalidToken` for the Bearer token)
/// with a description that names the problem and never echoes a value.
extension HTTPRequest {
    /// The grant of a token request (`application/x-www-form-urlencoded`): a device's JWT bearer
    /// assertion (RFC 7523), or a client's CIBA `auth_req_id` with its credentials.
    ///
    /// - Throws: `.invalidRequest` for another content type, a body that does not decode, a
    ///   missing `grant_type`, `assertion` or `auth_req_id`; `.unsupportedGrantType` for another
    ///   grant; client credential errors of ``clientCredentials(form:)``.
    func tokenGrant() throws(ServiceError) -> TokenGrant {
        let form = try formBody()
        guard let grantType = form["grant_type"], !grantType.isEmpty else {
            throw ServiceError(.invalidRequest, "grant_type is missing")
        }
        switch OAuthGrantType(rawValue: grantType) {
        case .jwtBearer:
            guard let assertion = form["assertion"], !assertion.isEmpty else {
                throw ServiceError(.invalidRequest, "assertion is missing")
            }
            return .jwtBearer(assertion: assertion)
        case .ciba:
            let credentials = try clientCredentials(form: form)
            guard let id = form["auth_req_id"], !id.isEmpty else {
                throw ServiceError(.invalidRequest, "auth_req_id is missing")
            }
            return .ciba(authReqID: id, client: credentials)
        case .authorizationCode:
            let credentials = try clientCredentials(form: form)
            guard let code = form["code"], !code.isEmpty else { throw ServiceError(.invalidRequest, "code is missing") }
            return .authorizationCode(
                code: code, redirectURI: form["redirect_uri"], verifier: form["code_verifier"], client: credentials,
                publicClientID: credentials == nil ? form["client_id"] : nil)
        default:
            throw ServiceError(
                .unsupportedGrantType,
                "only \(OAuthGrantType.jwtBearer), \(OAuthGrantType.ciba) and \(OAuthGrantType.authorizationCode) are supported"
            )
        }
    }

    /// The registration body (`application/json`).
    ///
    /// - Throws: `.invalidRequest` for another content type or a body ``RegistrationRequest``
    ///   refuses.
    func registrationRequest() throws(ServiceError) -> RegistrationRequest {
        try requireContentType("application/json")
        do {
            return try RegistrationRequest(json: body)
        } catch {
            throw ServiceError(.invalidRequest, error.problem)
        }
    }

    /// The `DPoP` header (RFC 9449), or nil without one.
    ///
    /// - Throws: `.invalidDPoPProof` when there is more than one (section 4.3, check 1).
    func dpopProof(atResource: Bool) throws(ServiceError) -> String? {
        let values = headers.values(for: "DPoP")
        guard values.count <= 1 else {
            throw ServiceError(.invalidDPoPProof(atResource: atResource), "a request carries at most one DPoP proof")
        }
        return values.first.map { Substring($0).trimmingWhitespace() }
    }

    /// The `limit` and `cursor` of `GET /v1/devices` (PROTOCOL.md section 4, "Device list").
    ///
    /// - Throws: `.invalidRequest` for a limit outside 1 to 100 or a cursor this server did not
    ///   write.
    func deviceListQuery() throws(ServiceError) -> (limit: Int, position: DeviceListPosition) {
        var limit = DeviceListCursor.defaultLimit
        if let text = query["limit"] {
            guard let value = Int(text), DeviceListCursor.limits.contains(value) else {
                throw ServiceError(
                    .invalidRequest,
                    "limit must be a number from \(DeviceListCursor.limits.lowerBound) to "
                        + "\(DeviceListCursor.limits.upperBound)")
            }
            limit = value
        }
        var position = DeviceListPosition.start
        if let cursor = query["cursor"] {
            guard let decoded = DeviceListCursor.decode(cursor) else {
                throw ServiceError(.invalidRequest, "cursor is not one this server gave out")
            }
            position = decoded
        }
        return (limit, position)
    }

    func requireContentType(_ expected: String) throws(ServiceError) {
        let mediaType = headers["Content-Type"]?.split(separator: ";", maxSplits: 1).first
            .map { $0.trimmingWhitespace().lowercased() }
        guard mediaType == expected else {
            throw ServiceError(.invalidRequest, "the Content-Type must be \(expected)")
        }
    }
}

extension Substring {
    /// The text without leading and trailing spaces and tabs.
    func trimmingWhitespace() -> String {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return String(text)
    }
}
