import KeyAuth

/// Authorization requests that wait for the browser without a row in the database: their
/// parameters travel in the page's hidden field `authorization`, sealed with an HMAC that only
/// the server can make.
///
/// Anyone can send a browser (or a script) to `GET /authorize`, so what it stores must not grow
/// with what anyone sends: a stored request per page let one address store 65 MB in 5 s. Sealed,
/// a page stores nothing; the request is trusted again only when it comes back with a tag that
/// verifies under one of the published keys (so every instance of a deployment accepts every
/// other's), before its expiry, and from the browser it was made for (the hash of the browser's
/// CSRF cookie is sealed in). The `purpose` is sealed in too, so that a sign-in page's request
/// cannot be presented to the consent form, which would skip the approval `prompt=login` asked
/// for.
///
/// Format: `v1.` + base64url(the parameters as JSON, with 128 random bits naming the page) + `.` +
/// base64url(HMAC-SHA-256 tag). Answering one (a code, a denial) is recorded once a user acts.
struct SealedAuthorizations: Sendable {
    /// What a sealed request waits for.
    enum Purpose: String, Sendable {
        /// The user name form, then the device's approval.
        case signIn = "sign-in"
        /// The signed-in user's answer on the consent page.
        case consent
    }

    /// The longest sealed text accepted: room for every request `/authorize` accepts. `state`
    /// and `nonce` are at most 1 KiB each, but JSON writes a control character as six bytes
    /// (`\u0001`), so the two can take 12 KiB, 16 KiB in base64url, besides the rest. With 8 KiB
    /// a request the server had accepted could never be signed in.
    static let maximumLength = 32 * 1024

    let keys: ServerSigningKeys

    /// `record` sealed for `purpose` with the current key.
    ///
    /// - Throws: `KeyAuthError` when no key is loaded or the MAC cannot be made.
    func seal(_ record: PendingAuthorizationRecord, for purpose: Purpose, now: Int64) throws(KeyAuthError) -> String {
        // 128 random bits: every page's request is its own, even for the same parameters in the
        // same second, so that answering one (which is recorded) leaves the next one open.
        var members = Self.json(record)
        members["page"] = .string(Base64URL.encode(try CryptoPrimitives.randomBytes(count: 16)))
        let payload = Array(JSONValue.object(members).serialized().utf8)
        let tag = try Self.tag(secret: try keys.current(at: now).nonceSecret, purpose: purpose, payload: payload)
        return "v1." + Base64URL.encode(payload) + "." + Base64URL.encode(tag)
    }

    /// The request `text` seals for `purpose`, when one of the published keys made its tag, it has
    /// not expired at `now`, and `browserBinding` (the hash of the presenting browser's CSRF
    /// cookie) is the one sealed in; nil otherwise.
    func unseal(_ text: String, for purpose: Purpose, browserBinding: [UInt8], now: Int64)
        -> PendingAuthorizationRecord?
    {
        guard text.utf8.count <= Self.maximumLength else { return nil }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "v1", let payload = Base64URL.decode(parts[1]),
            let tag = Base64URL.decode(parts[2])
        else { return nil }
        // The tag first: until it verifies, the payload is only bytes a client chose.
        let authentic = keys.keys.contains { key in
            guard let expected = try? Self.tag(secret: key.nonceSecret, purpose: purpose, payload: payload) else {
                return false
            }
            return CryptoPrimitives.constantTimeEquals(expected, tag)
        }
        guard authentic, let value = try? JSONValue(parsing: payload), let record = Self.record(value),
            now < record.expiresAt, CryptoPrimitives.constantTimeEquals(record.browserBinding, browserBinding)
        else { return nil }
        return record
    }

    private static func tag(secret: [UInt8], purpose: Purpose, payload: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.hmacSHA256(
            key: secret, message: Array("keyauth pending authorization\n\(purpose.rawValue)\n".utf8) + payload)
    }

    private static func json(_ record: PendingAuthorizationRecord) -> [String: JSONValue] {
        var members: [String: JSONValue] = [
            "binding": .string(Base64URL.encode(record.browserBinding)), "client_id": .string(record.clientID),
            "redirect_uri": .string(record.redirectURI), "scope": .string(record.scope),
            "code_challenge": .string(record.codeChallenge), "expires_at": .integer(record.expiresAt),
        ]
        if let state = record.state { members["state"] = .string(state) }
        if let nonce = record.nonce { members["nonce"] = .string(nonce) }
        if let hint = record.loginHint { members["login_hint"] = .string(hint) }
        if !record.acrValues.isEmpty { members["acr_values"] = .array(record.acrValues.map(JSONValue.string)) }
        if let maxAge = record.maxAge { members["max_age"] = .integer(maxAge) }
        return members
    }

    private static func record(_ value: JSONValue) -> PendingAuthorizationRecord? {
        guard let binding = value["binding"]?.stringValue.flatMap(Base64URL.decode),
            let clientID = value["client_id"]?.stringValue, let redirectURI = value["redirect_uri"]?.stringValue,
            let scope = value["scope"]?.stringValue, let challenge = value["code_challenge"]?.stringValue,
            let expiresAt = value["expires_at"]?.integerValue
        else { return nil }
        return PendingAuthorizationRecord(
            browserBinding: binding, clientID: clientID, redirectURI: redirectURI, scope: scope,
            state: value["state"]?.stringValue, nonce: value["nonce"]?.stringValue, codeChallenge: challenge,
            loginHint: value["login_hint"]?.stringValue, expiresAt: expiresAt,
            acrValues: value["acr_values"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            maxAge: value["max_age"]?.integerValue)
    }
}
