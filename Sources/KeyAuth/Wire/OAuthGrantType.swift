/// An OAuth 2.0 grant type, as `grant_type` carries it and discovery lists it.
///
/// keyauth speaks one grant, RFC 7523's JWT bearer grant; a struct rather than a constant so that
/// the client, the server and the discovery document name it through one value.
public struct OAuthGrantType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The JWT bearer grant of RFC 7523 section 2.1: the only grant `/oauth/token` accepts.
    public static let jwtBearer = OAuthGrantType(rawValue: "urn:ietf:params:oauth:grant-type:jwt-bearer")
}
