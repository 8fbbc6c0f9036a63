import Foundation

/// An access token from the server's token endpoint, with the moment it stops working.
///
/// The expiry is computed when the token arrives (`expires_in` from now) so that a stored token
/// can be judged later without a clock shared with the server. ``description`` never shows the
/// token, so that logging the value or an error holding it leaks nothing.
public struct AccessToken: Sendable, Hashable, CustomStringConvertible {
    /// The token, for an `Authorization: Bearer` header.
    /// - Warning: whoever holds it acts as the user until it expires; keep it out of logs.
    public let value: String
    /// The token type; always `Bearer` from a keyauth server.
    public let tokenType: String
    /// When the server stops accepting it.
    public let expiresAt: Date
    /// The offline grant the server sent with a host login's token (PROTOCOL.md section 7.2),
    /// for `keyauth-pam-helper`; nil for every other login.
    package var offlineGrant: String? = nil

    /// Wraps a token; use ``KeyAuthClient/requestToken(assertion:proofs:)`` to get one.
    public init(value: String, tokenType: String = "Bearer", expiresAt: Date) {
        self.value = value
        self.tokenType = tokenType
        self.expiresAt = expiresAt
    }

    /// Whether the token still works `margin` seconds from `now`, so that a request sent with it
    /// does not arrive just after it expired.
    public func isValid(for margin: TimeInterval = 30, now: Date = Date()) -> Bool {
        expiresAt.timeIntervalSince(now) > margin
    }

    /// A description without the token itself.
    public var description: String {
        "AccessToken(\(tokenType), expires \(Int64(clampingSeconds: expiresAt.timeIntervalSince1970)))"
    }
}
