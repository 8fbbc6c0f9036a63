/// What a server announces in `/.well-known/openid-configuration` (PROTOCOL.md section 4).
///
/// The client reads it for the ``issuer``: assertions must carry it as `aud`, and a server behind
/// a proxy may have an issuer that differs from the URL the client was given.
public struct ServerMetadata: Sendable, Hashable {
    /// The server's issuer URL, the audience of device assertions.
    public let issuer: String
    /// The token endpoint, when announced.
    public let tokenEndpoint: String?
    /// Where the server's public signing keys are, when announced.
    public let jwksURI: String?
    /// The grant types the token endpoint accepts.
    public let grantTypesSupported: [String]
    /// The assertion signing algorithms the token endpoint accepts
    /// (`token_endpoint_auth_signing_alg_values_supported`).
    public let signingAlgorithmsSupported: [String]
    /// The algorithms of the DPoP proofs the server accepts (`dpop_signing_alg_values_supported`,
    /// RFC 9449 section 5.1); empty for a server without DPoP.
    public let dpopSigningAlgorithmsSupported: [String]
    /// Whether the server issues only DPoP-bound tokens (`dpop_bound_access_tokens_required`, a
    /// keyauth member): then a token request needs a proof.
    public let dpopRequired: Bool
    /// Where client applications start sign-in requests (CIBA
    /// `backchannel_authentication_endpoint`), when announced.
    public var backchannelAuthenticationEndpoint: String?
    /// Whether the server is an OpenID Connect provider (authorization code flow with PKCE, ID
    /// tokens, UserInfo, RP-Initiated Logout): the discovery document then has its members.
    public var isOpenIDProvider = false

    /// Creates metadata, for tests and for apps that configure a server without discovery.
    public init(
        issuer: String, tokenEndpoint: String? = nil, jwksURI: String? = nil, grantTypesSupported: [String] = [],
        signingAlgorithmsSupported: [String] = [], dpopSigningAlgorithmsSupported: [String] = [],
        dpopRequired: Bool = false
    ) {
        self.issuer = issuer
        self.tokenEndpoint = tokenEndpoint
        self.jwksURI = jwksURI
        self.grantTypesSupported = grantTypesSupported
        self.signingAlgorithmsSupported = signingAlgorithmsSupported
        self.dpopSigningAlgorithmsSupported = dpopSigningAlgorithmsSupported
        self.dpopRequired = dpopRequired
    }

    /// Whether the server binds tokens to a proof's key when the token request carries one.
    public var supportsDPoP: Bool { !dpopSigningAlgorithmsSupported.isEmpty }
}

extension ServerMetadata {
    /// What a keyauth server at `issuer` announces: its token endpoint and JWKS under the issuer,
    /// the JWT bearer grant, RS256 assertions, DPoP proofs of the three algorithms.
    package init(keyAuthServerAt issuer: String, dpopRequired: Bool = false) {
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        self.init(
            issuer: issuer, tokenEndpoint: base + "/oauth/token", jwksURI: base + "/.well-known/jwks.json",
            grantTypesSupported: [
                OAuthGrantType.jwtBearer.rawValue, OAuthGrantType.ciba.rawValue,
                OAuthGrantType.authorizationCode.rawValue,
            ],
            signingAlgorithmsSupported: ["RS256"],
            dpopSigningAlgorithmsSupported: JWSAlgorithm.allCases.map(\.rawValue), dpopRequired: dpopRequired)
        backchannelAuthenticationEndpoint = base + "/bc-authorize"
        isOpenIDProvider = true
    }

    /// The discovery document.
    package var jsonValue: JSONValue {
        var members: [String: JSONValue] = [
            "issuer": .string(issuer), "grant_types_supported": .array(grantTypesSupported.map(JSONValue.string)),
            "token_endpoint_auth_signing_alg_values_supported": .array(
                signingAlgorithmsSupported.map(JSONValue.string)),
        ]
        if let tokenEndpoint { members["token_endpoint"] = .string(tokenEndpoint) }
        if let jwksURI { members["jwks_uri"] = .string(jwksURI) }
        if supportsDPoP {
            members["dpop_signing_alg_values_supported"] = .array(dpopSigningAlgorithmsSupported.map(JSONValue.string))
            members["dpop_bound_access_tokens_required"] = .bool(dpopRequired)
        }
        if let backchannelAuthenticationEndpoint {
            // CIBA Core 1.0 section 4: poll mode only, no user code, clients authenticate with
            // their secret.
            members["backchannel_authentication_endpoint"] = .string(backchannelAuthenticationEndpoint)
            members["backchannel_token_delivery_modes_supported"] = .array(["poll"])
            members["backchannel_user_code_parameter_supported"] = .bool(false)
            members["token_endpoint_auth_methods_supported"] = .array([
                "client_secret_basic", "client_secret_post",
            ])
        }
        if isOpenIDProvider {
            let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
            func strings(_ values: [String]) -> JSONValue { .array(values.map(JSONValue.string)) }
            members["authorization_endpoint"] = .string(base + "/authorize")
            members["userinfo_endpoint"] = .string(base + "/userinfo")
            members["end_session_endpoint"] = .string(base + "/end-session")
            members["response_types_supported"] = strings(["code"])
            members["response_modes_supported"] = strings(["query"])
            members["code_challenge_methods_supported"] = strings(["S256"])
            members["subject_types_supported"] = strings(["public"])
            members["id_token_signing_alg_values_supported"] = strings(["RS256"])
            members["scopes_supported"] = strings(["openid", "profile"])
            members["claims_supported"] = strings([
                "iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "acr", "amr", "azp", "at_hash", "sid",
                "preferred_username", "urn:openid:params:jwt:claim:auth_req_id",
            ])
            members["prompt_values_supported"] = strings(["none", "login", "consent"])
            // What `acr_values` may ask for, at `/authorize` and at `/bc-authorize` alike.
            members["acr_values_supported"] = strings(AuthenticationContextClass.allCases.map(\.rawValue))
            members["authorization_response_iss_parameter_supported"] = .bool(true)
            members["request_parameter_supported"] = .bool(false)
            members["request_uri_parameter_supported"] = .bool(false)
            // Public clients (native apps, RFC 8252) authenticate with PKCE alone.
            members["token_endpoint_auth_methods_supported"] = strings([
                "client_secret_basic", "client_secret_post", "none",
            ])
        }
        return .object(members)
    }

    /// Reads a discovery document as a client: an `issuer` that is an http(s) URL of printable
    /// ASCII is required (RFC 8414 section 2; it is stored, and printed by `keyauth status`, so
    /// escape sequences in it would reach the user's terminal), the rest is optional and members
    /// of the wrong type count as absent.
    ///
    /// - Throws: ``WireFormatError`` when the issuer is missing or not such a URL.
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let issuer = object["issuer"]?.stringValue, !issuer.isEmpty else {
            throw WireFormatError("has no issuer")
        }
        guard issuer.hasPrefix("https://") || issuer.hasPrefix("http://"), InputRules.isPrintableASCIIWord(issuer)
        else { throw WireFormatError("has an issuer that is not an http(s) URL of printable ASCII") }
        self.init(
            issuer: issuer, tokenEndpoint: object["token_endpoint"]?.stringValue,
            jwksURI: object["jwks_uri"]?.stringValue,
            grantTypesSupported: object["grant_types_supported"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            signingAlgorithmsSupported: object["token_endpoint_auth_signing_alg_values_supported"]?.arrayValue?
                .compactMap(\.stringValue) ?? [],
            dpopSigningAlgorithmsSupported: object["dpop_signing_alg_values_supported"]?.arrayValue?
                .compactMap(\.stringValue) ?? [],
            dpopRequired: object["dpop_bound_access_tokens_required"] == .bool(true))
        backchannelAuthenticationEndpoint = object["backchannel_authentication_endpoint"]?.stringValue
    }
}
