import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Credentials stores and the access token provider")
struct CredentialsStoreTests {
    @Test("the file store keeps a token per account in a 0600 file inside a 0700 directory")
    func fileStoreRoundTrip() throws {
        let home = TemporaryDirectory("keyauth-creds")
        defer { home.remove() }
        let store = FileCredentialsStore(directory: home.path + "/accounts")
        let token = AccessToken(value: "a.b.c", expiresAt: Date(timeIntervalSince1970: 1_900_000_000))
        #expect(try store.loadToken(account: "alice@host") == nil)
        try store.saveToken(token, account: "alice@host")
        let path = try store.path(for: "alice@host")
        #expect(fileMode(path) == 0o600)
        #expect(fileMode(home.path + "/accounts/alice@host") == 0o700)
        #expect(try store.loadToken(account: "alice@host") == token)
        #expect(try store.loadToken(account: "bob@host") == nil)
        try store.deleteToken(account: "alice@host")
        #expect(try store.loadToken(account: "alice@host") == nil)
    }

    @Test("a damaged token file counts as no token")
    func damagedFile() throws {
        let home = TemporaryDirectory("keyauth-creds")
        defer { home.remove() }
        let store = FileCredentialsStore(directory: home.path)
        try store.saveToken(AccessToken(value: "x", expiresAt: Date()), account: "a")
        let path = try store.path(for: "a")
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        #expect(try store.loadToken(account: "a") == nil)
    }

    @Test("a token file readable by others is refused")
    func unprotectedFile() throws {
        let home = TemporaryDirectory("keyauth-creds")
        defer { home.remove() }
        let store = FileCredentialsStore(directory: home.path)
        try store.saveToken(AccessToken(value: "x", expiresAt: Date()), account: "a")
        chmod(try store.path(for: "a"), 0o644)
        let error = #expect(throws: KeyAuthError.self) { try store.loadToken(account: "a") }
        #expect(error?.code == .keyUnprotected)
    }

    @Test("account names that could leave the directory are refused", arguments: ["../x", ".hidden", "a/b", ""])
    func badAccountNames(name: String) {
        let store = FileCredentialsStore(directory: "/tmp/unused")
        let error = #expect(throws: KeyAuthError.self) { try store.path(for: name) }
        #expect(error?.code == .invalidArgument)
    }

    @Test("the in-memory store keeps tokens per account")
    func inMemory() throws {
        let store = InMemoryCredentialsStore()
        let token = AccessToken(value: "t", expiresAt: Date())
        try store.saveToken(token, account: "a")
        #expect(try store.loadToken(account: "a") == token)
        #expect(try store.loadToken(account: "b") == nil)
        try store.deleteToken(account: "a")
        #expect(try store.loadToken(account: "a") == nil)
    }

    @Test("the provider hands out a stored token and logs in again when it expires within 30 s")
    func providerRefreshes() async throws {
        let home = TemporaryDirectory("keyauth-provider")
        defer { home.remove() }
        let keys = KeyPairStore(directory: home.path)
        try keys.store(TestKeys.first)
        let logins = OutputCollector()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let hooks = AuthenticatorHooks<AccessToken>(
            registerPublicKey: { _, _ in .active },
            authenticate: { _ in
                logins.append("x")
                return AccessToken(value: "fresh\(logins.text.count)", expiresAt: now.addingTimeInterval(900))
            })
        let authenticator = Authenticator(
            store: keys, presence: NoPresence(), configuration: .init(audience: "http://issuer"), hooks: hooks)
        let credentials = InMemoryCredentialsStore()
        let provider = AccessTokenProvider(
            account: "a", credentials: credentials, authenticator: authenticator, clock: .fixed(now))

        try credentials.saveToken(AccessToken(value: "stored", expiresAt: now.addingTimeInterval(31)), account: "a")
        #expect(try await provider.accessToken().value == "stored")
        #expect(logins.text.isEmpty)

        try credentials.saveToken(AccessToken(value: "stored", expiresAt: now.addingTimeInterval(29)), account: "a")
        #expect(try await provider.accessToken().value == "fresh1")
        #expect(try credentials.loadToken(account: "a")?.value == "fresh1")
        #expect(try await provider.accessToken().value == "fresh1")
        #expect(logins.text.count == 1)
    }

    @Test("five concurrent accessToken() calls share one login")
    func concurrentCallersShareOneLogin() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let keys = KeyPairStore(directory: directory.path + "/key")
        try keys.store(TestKeys.first)
        let logins = OutputCollector()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let hooks = AuthenticatorHooks<AccessToken>(
            registerPublicKey: { _, _ in .active },
            authenticate: { _ in
                logins.append("x")
                // A login takes a while (a PIN prompt, a server): the other callers arrive meanwhile.
                try await Task.sleep(for: .milliseconds(200))
                return AccessToken(value: "fresh\(logins.text.count)", expiresAt: now.addingTimeInterval(900))
            })
        let authenticator = Authenticator(
            store: keys, presence: NoPresence(), configuration: .init(audience: "http://issuer"), hooks: hooks)
        let provider = AccessTokenProvider(
            account: "a", credentials: InMemoryCredentialsStore(), authenticator: authenticator, clock: .fixed(now))
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<5 { group.addTask { try await provider.accessToken().value } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(tokens == Array(repeating: "fresh1", count: 5))
        #expect(logins.text.count == 1)
        // The next login after that one is a new login.
        #expect(try await provider.login().value == "fresh2")
    }
}

extension CredentialsStoreTests {
    @Test("the provider's reset deletes the stored token before the key, so it is never handed out again")
    func providerResetDropsToken() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let keys = KeyPairStore(directory: directory.path + "/key")
        try keys.store(TestKeys.first)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let hooks = AuthenticatorHooks<AccessToken>(
            registerPublicKey: { _, _ in .active },
            authenticate: { _ in AccessToken(value: "fresh", expiresAt: now.addingTimeInterval(900)) },
            revoke: { _ in throw KeyAuthError(.transportFailed, "the server is down") })
        let authenticator = Authenticator(
            store: keys, presence: NoPresence(), configuration: .init(audience: "http://issuer"), hooks: hooks)
        let credentials = InMemoryCredentialsStore()
        let provider = AccessTokenProvider(
            account: "a", credentials: credentials, authenticator: authenticator, clock: .fixed(now))
        #expect(try await provider.accessToken().value == "fresh")
        // The server is down: without force the key stays, and the token is gone all the same.
        await #expect(throws: KeyAuthError.self) { try await provider.reset() }
        #expect(try credentials.loadToken(account: "a") == nil)
        #expect(keys.hasKey)
        try await provider.reset(force: true)
        #expect(!keys.hasKey)
    }
}
