/// An OAuth 2.0 grant type, as `grant_type` carries it and discovery lists it.
///
/// keyauth speaks two grants: RFC 7523's JWT bearer grant (a device logs in) and the CIBA grant (an
/// application collects a sign-in a device approved); a struct so that the client, the server and
/// the discovery document name each through one value.
public struct OAuthGrantType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The JWT bearer grant of RFC 7523 section 2.1: a device's login.
    public static let jwtBearer = OAuthGrantType(rawValue: "urn:ietf:params:oauth:grant-type:jwt-bearer")
    /// The grant of OpenID Connect CIBA Core 1.0 section 10.1: a client application polls for the
    /// result of its backchannel authentication request.
    public static let ciba = OAuthGrantType(rawValue: "urn:openid:params:grant-type:ciba")
}
