import Foundation

/// Hands out a valid access token, logging in again with the device key when the stored one is
/// about to expire.
///
/// The device key plays the part of a refresh token: nothing long-lived is stored besides the
/// key, and each new token needs the presence check again, so a stolen token file is worth at
/// most one token lifetime.
///
/// Concurrent callers share one login: while a login runs, ``accessToken()`` and ``login()``
/// wait for it instead of starting another (one presence check, not one per caller). Copies of a
/// provider share that login too.
public struct AccessTokenProvider: Sendable {
    /// The account whose token is stored.
    public let account: String
    /// Where tokens are kept between runs.
    public let credentials: any CredentialsStore
    /// Logs in with the device key; its hooks come from ``KeyAuthClient/authenticatorHooks(enrollment:onRegistered:onApprovalPending:dpop:onProofKey:)``.
    public let authenticator: Authenticator<AccessToken>
    /// A stored token that expires within this many seconds is not handed out.
    public var refreshMargin: TimeInterval = 30
    /// The clock that judges stored tokens.
    public let clock: KeyAuthClock
    /// The login in flight, shared by every copy of this provider.
    private let inFlight = LoginInFlight()

    /// Creates a provider.
    ///
    /// - Parameters:
    ///   - account: the name the token is stored under.
    ///   - credentials: where tokens are kept between runs.
    ///   - authenticator: logs in with the device key when no stored token is valid.
    ///   - clock: the time source; tests pass a fixed one.
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
        return try await inFlight.join(logIn(unlessStored: true))
    }

    /// Logs in with the device key (presence check included) and stores the new token; when a
    /// login is already running, waits for that one instead.
    ///
    /// - Throws: the ``Authenticator``'s errors: `.wrongPIN`, `.presenceDenied`,
    ///   `.approvalPending`, `.serverRejected`, `.transportFailed`, `.hookFailed`, key errors;
    ///   `.cancelled` when the caller is cancelled and no other waits for the login.
    @discardableResult
    public func login() async throws(KeyAuthError) -> AccessToken {
        try await inFlight.join(logIn(unlessStored: false))
    }

    /// Forgets this device here: deletes the stored token, then resets the ``authenticator``
    /// (revoking the key through its hook, then deleting it).
    ///
    /// The token goes first, and again after the key: a reset after the server refused the
    /// device left the token to be handed out by ``accessToken()`` for the rest of its
    /// lifetime, a forced reset with the server down left one that the server still accepts,
    /// and a login that was running meanwhile (its PIN prompt open) stores its token late.
    ///
    /// - Parameter force: as ``Authenticator/reset(force:)``; the key goes even when the token
    ///   cannot be deleted.
    /// - Throws: the store's errors (unless `force`), and ``Authenticator/reset(force:)``'s.
    public func reset(force: Bool = false) async throws(KeyAuthError) {
        func deleteToken() throws(KeyAuthError) {
            do {
                try credentials.deleteToken(account: account)
            } catch {
                if !force { throw error }
            }
        }
        try deleteToken()
        try await authenticator.reset(force: force)
        try deleteToken()
    }

    /// The login a ``LoginInFlight`` runs; with `unlessStored`, it first takes a token that a
    /// login finished just before it stored, so a caller that arrives a moment late does not
    /// log in again.
    private func logIn(unlessStored: Bool) -> @Sendable () async throws(KeyAuthError) -> AccessToken {
        let provider = self
        return { () throws(KeyAuthError) -> AccessToken in
            if unlessStored, let token = try provider.storedToken() { return token }
            let token = try await provider.authenticator.login()
            try provider.credentials.saveToken(token, account: provider.account)
            return token
        }
    }
}
