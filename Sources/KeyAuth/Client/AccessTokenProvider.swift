import Foundation

/// Hands out a valid access token, logging in again with the device key when the stored one is
/// about to expire.
///
/// The device key plays the part of a refresh token: nothing long-lived is stored besides the
/// key, and each new token needs the presence check again, so a stolen token file is worth at
/// most one token lifetime.
public struct AccessTokenProvider: Sendable {
    /// The account whose token is stored.
    public let account: String
    /// Where tokens are kept between runs.
    public let credentials: any CredentialsStore
    /// Logs in with the device key; its hooks come from ``KeyAuthClient/authenticatorHooks(enrollment:onRegistered:onApprovalPending:)``.
    public let authenticator: Authenticator<AccessToken>
    /// A stored token that expires within this many seconds is not handed out.
    public var refreshMargin: TimeInterval = 30
    /// The clock that judges stored tokens.
    public let clock: KeyAuthClock

    /// Creates a provider.
    ///
    /// - Parameter clock: the time source; tests pass a fixed one.
    public init(
        account: String, credentials: any CredentialsStore, authenticator: Authenticator<AccessToken>,
        clock: KeyAuthClock = .system
    ) {
        self.account = account
        self.credentials = credentials
        self.authenticator = authenticator
        self.clock = clock
    }

    /// The stored token when it is valid for more than ``refreshMargin`` seconds, else nil.
    ///
    /// - Throws: the store's errors.
    public func storedToken() throws(KeyAuthError) -> AccessToken? {
        guard let token = try credentials.loadToken(account: account),
            token.isValid(for: refreshMargin, now: clock.now)
        else { return nil }
        return token
    }

    /// The stored token unless it expires within ``refreshMargin`` seconds; otherwise a new one
    /// from ``login()``.
    ///
    /// - Throws: as ``login()``, and the store's errors.
    public func accessToken() async throws(KeyAuthError) -> AccessToken {
        if let token = try storedToken() { return token }
        return try await login()
    }

    /// Logs in with the device key (presence check included) and stores the new token.
    ///
    /// - Throws: the ``Authenticator``'s errors: `.wrongPIN`, `.presenceDenied`,
    ///   `.approvalPending`, `.serverRejected`, `.transportFailed`, key errors.
    @discardableResult
    public func login() async throws(KeyAuthError) -> AccessToken {
        let token = try await authenticator.login()
        try credentials.saveToken(token, account: account)
        return token
    }
}
