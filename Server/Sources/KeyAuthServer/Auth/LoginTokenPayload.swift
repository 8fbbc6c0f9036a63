import KeyAuth

/// The claims of the access token a device login returns, written straight to JSON text.
///
/// Every login signs one, so these claims skip the ``JWTClaims`` a general token is built from:
/// no claim set to fill, merge and serialize. The bytes are exactly those
/// ``AccessTokens/issue(user:deviceKID:bound:extra:)`` writes for the same claims, in
/// ``JWTClaims``'s order: `iss`, `sub`, `aud`, then the rest by name (`amr`, `client_id`, `cnf`,
/// `device_tier`, `exp`, `iat`, `jti`). A test compares the two.
struct LoginTokenPayload {
    /// `iss`, and `aud`: a device's token is for the server's own API.
    let issuer: String
    /// `sub`: the device's user.
    let user: String
    /// `client_id`: the device key's thumbprint.
    let deviceKID: String
    /// `amr`: what the device stated, or `["swk"]`.
    let methods: [String]
    /// Whether the token is DPoP-bound to the device key: `cnf.jkt` is then its thumbprint.
    let bound: Bool
    /// `device_tier`: what the server established at registration.
    let deviceTier: String
    /// `iat`; `exp` is `lifetime` later.
    let issuedAt: Int64
    let lifetime: Int64
    /// The 16 random bytes whose base64url is the `jti`.
    let tokenID: [UInt8]

    /// The compact JSON text of the claims.
    func jsonBytes() -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(384)
        JSONText.appendRaw("{\"iss\":", to: &output)
        JSONText.appendString(issuer, to: &output)
        JSONText.appendRaw(",\"sub\":", to: &output)
        JSONText.appendString(user, to: &output)
        JSONText.appendRaw(",\"aud\":", to: &output)
        JSONText.appendString(issuer, to: &output)
        JSONText.appendRaw(",\"amr\":[", to: &output)
        for (position, method) in methods.enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            JSONText.appendString(method, to: &output)
        }
        JSONText.appendRaw("],\"client_id\":", to: &output)
        JSONText.appendString(deviceKID, to: &output)
        if bound {
            JSONText.appendRaw(",\"cnf\":{\"jkt\":", to: &output)
            JSONText.appendString(deviceKID, to: &output)
            output.append(UInt8(ascii: "}"))
        }
        JSONText.appendRaw(",\"device_tier\":", to: &output)
        JSONText.appendString(deviceTier, to: &output)
        JSONText.appendRaw(",\"exp\":", to: &output)
        JSONText.appendInteger(issuedAt.addingSaturating(lifetime), to: &output)
        JSONText.appendRaw(",\"iat\":", to: &output)
        JSONText.appendInteger(issuedAt, to: &output)
        // Base64url needs no escaping.
        JSONText.appendRaw(",\"jti\":\"", to: &output)
        Base64URL.encode(tokenID, appendingTo: &output)
        JSONText.appendRaw("\"}", to: &output)
        return output
    }
}
