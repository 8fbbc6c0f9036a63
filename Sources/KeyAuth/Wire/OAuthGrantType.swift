/// An OAuth 2.0 grant type, as `grant_type` carries it and discovery lists it.
///
/// keyauth speaks three grants: RFC 7523's JWT bearer grant (a device logs in), the CIBA grant (an
/// application collects a sign-in a device approved) and the authorization code grant (a relying
/// party redeems a code); a struct so that the client, the server and
/// the discovery document name each through one value.
package struct OAuthGrantType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String
    package init(rawValue: String) { self.rawValue = rawValue }
    package var description: String { rawValue }

    /// The JWT bearer grant of RFC 7523 section 2.1: a device's login.
    package static let jwtBearer = OAuthGrantType(rawValue: "urn:ietf:params:oauth:grant-type:jwt-bearer")
    /// The grant of OpenID Connect CIBA Core 1.0 section 10.1: a client application polls for the
    /// result of its backchannel authentication request.
    package static let ciba = OAuthGrantType(rawValue: "urn:openid:params:grant-type:ciba")
    /// The authorization code grant of RFC 6749 section 4.1.3: a relying party redeems the code
    /// keyauth-server's OpenID Connect authorization endpoint gave it.
    package static let authorizationCode = OAuthGrantType(rawValue: "authorization_code")
}
