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

    /// Creates metadata, for tests and for apps that configure a server without discovery.
    public init(
        issuer: String, tokenEndpoint: String? = nil, jwksURI: String? = nil, grantTypesSupported: [String] = []
    ) {
        self.issuer = issuer
        self.tokenEndpoint = tokenEndpoint
        self.jwksURI = jwksURI
        self.grantTypesSupported = grantTypesSupported
    }
}
