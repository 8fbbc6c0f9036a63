import Synchronization

/// Keeps tokens in memory only, for apps that must not write tokens to disk and for tests.
public final class InMemoryCredentialsStore: CredentialsStore {
    private let tokens = Mutex<[String: AccessToken]>([:])

    /// Creates an empty store.
    public init() {}

    /// The token of `account`, if stored in this process.
    public func loadToken(account: String) throws(KeyAuthError) -> AccessToken? {
        tokens.withLock { $0[account] }
    }

    /// Stores the token in memory.
    public func saveToken(_ token: AccessToken, account: String) throws(KeyAuthError) {
        tokens.withLock { $0[account] = token }
    }

    /// Forgets the token.
    public func deleteToken(account: String) throws(KeyAuthError) {
        _ = tokens.withLock { $0.removeValue(forKey: account) }
    }
}
