/// The token endpoint's success answer (RFC 6749 section 5.1, PROTOCOL.md section 3):
/// `{"access_token":...,"expires_in":...,"token_type":"Bearer"}`.
package struct TokenResponse: Sendable, Equatable {
    /// The type of a token sent as `Authorization: Bearer`.
    package static let bearer = "Bearer"
    /// The type of a DPoP-bound token (RFC 9449 section 5), sent as `Authorization: DPoP` with a
    /// proof.
    package static let dpop = "DPoP"

    /// `access_token`.
    package var accessToken: String
    /// `expires_in` in seconds; nil when a client reads an answer without a positive integer.
    package var expiresIn: Int64?
    /// `token_type`; `Bearer` when a client reads an answer without one.
    package var tokenType: String
    /// `offline_grant`: a host login's offline grant (PROTOCOL.md section 7.2), nil otherwise.
    package var offlineGrant: String?

    package init(accessToken: String, expiresIn: Int64?, tokenType: String = bearer, offlineGrant: String? = nil) {
        self.accessToken = accessToken
        self.expiresIn = expiresIn
        self.tokenType = tokenType
        self.offlineGrant = offlineGrant
    }

    /// The answer's JSON bytes, written member by member: the token is 700 bytes of base64url
    /// that a general serializer would look at character by character on every login.
    package var jsonBytes: [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(accessToken.utf8.count + 80)
        JSONText.appendRaw("{\"access_token\":", to: &body)
        JSONText.appendString(accessToken, to: &body)
        if let expiresIn {
            JSONText.appendRaw(",\"expires_in\":", to: &body)
            JSONText.appendInteger(expiresIn, to: &body)
        }
        JSONText.appendRaw(",\"token_type\":", to: &body)
        JSONText.appendString(tokenType, to: &body)
        if let offlineGrant {
            JSONText.appendRaw(",\"\(OfflineGrantFormat.responseMember)\":", to: &body)
            JSONText.appendString(offlineGrant, to: &body)
        }
        JSONText.appendRaw("}", to: &body)
        return body
    }

    /// Reads an answer as a client: a non-empty `access_token` of printable ASCII is required
    /// (RFC 6750's `b64token` is narrower still): `keyauth token` prints it and every request
    /// sends it in a header, where a control character or a line break does harm.
    ///
    /// - Throws: ``WireFormatError`` when it is missing, empty or holds anything else.
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let token = object["access_token"]?.stringValue, !token.isEmpty else {
            throw WireFormatError("has no access_token")
        }
        guard InputRules.isPrintableASCIIWord(token) else {
            throw WireFormatError("has an access_token with characters other than printable ASCII")
        }
        let expiresIn = object["expires_in"]?.integerValue
        self.init(
            accessToken: token, expiresIn: expiresIn.flatMap { $0 > 0 ? $0 : nil },
            tokenType: object["token_type"]?.stringValue ?? Self.bearer,
            offlineGrant: object[OfflineGrantFormat.responseMember]?.stringValue)
    }
}
