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
            grantTypesSupported: [OAuthGrantType.jwtBearer.rawValue, OAuthGrantType.ciba.rawValue],
            signingAlgorithmsSupported: ["RS256"],
            dpopSigningAlgorithmsSupported: JWSAlgorithm.allCases.map(\.rawValue), dpopRequired: dpopRequired)
        backchannelAuthenticationEndpoint = base + "/bc-authorize"
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
        return .object(members)
    }

    /// Reads a discovery document as a client: a non-empty `issuer` is required, the rest is
    /// optional and members of the wrong type count as absent.
    ///
    /// - Throws: ``WireFormatError`` when the issuer is missing.
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let issuer = object["issuer"]?.stringValue, !issuer.isEmpty else {
            throw WireFormatError("has no issuer")
        }
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
