import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

private func mode(of path: String) -> mode_t {
    var info = stat()
    stat(path, &info)
    return info.st_mode & 0o777
}

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
        #expect(mode(of: path) == 0o600)
        #expect(mode(of: home.path + "/accounts/alice@host") == 0o700)
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

    @Test("account files round-trip and a damaged one is accountCorrupt")
    func accountStore() throws {
        let home = TemporaryDirectory("keyauth-accounts")
        defer { home.remove() }
        let accounts = AccountStore(home: home.path)
        let account = KeyAuthAccount(
            name: "alice@example.com", serverURL: "https://example.com", issuer: "https://example.com",
            user: "alice", deviceName: "laptop", keyID: nil, presence: .pam, pamService: "login", status: .pending,
            createdAt: Date(timeIntervalSince1970: 1_700_000_000))
        try accounts.save(account)
        #expect(try accounts.load("alice@example.com") == account)
        #expect(accounts.accountNames() == ["alice@example.com"])
        #expect(try accounts.resolve(nil) == "alice@example.com")
        let file = try accounts.accountFile(for: "alice@example.com")
        #expect(mode(of: file) == 0o600)
        try Data("{\"name\":".utf8).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        let error = #expect(throws: KeyAuthError.self) { try accounts.load("alice@example.com") }
        #expect(error?.code == .accountCorrupt)
    }

    @Test("the default account name is user@host:port, sanitized")
    func defaultAccountName() {
        #expect(
            AccountStore.defaultAccountName(user: "alice", serverURL: "http://127.0.0.1:8088") == "alice@127.0.0.1:8088"
        )
        #expect(
            AccountStore.defaultAccountName(user: "bob", serverURL: "https://auth.example.com/base")
                == "bob@auth.example.com")
        #expect(
            AccountStore.isValidAccountName(AccountStore.defaultAccountName(user: "a", serverURL: "http://[::1]:80")))
    }

    @Test("the keyauth home follows KEYAUTH_HOME, then XDG_DATA_HOME, then HOME")
    func homeResolution() throws {
        #expect(
            try AccountStore.defaultHome(environment: ["KEYAUTH_HOME": "/k", "XDG_DATA_HOME": "/x", "HOME": "/h"])
                == "/k")
        #expect(try AccountStore.defaultHome(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]) == "/x/keyauth")
        #expect(
            try AccountStore.defaultHome(environment: ["XDG_DATA_HOME": "rel", "HOME": "/h"])
                == "/h/.local/share/keyauth")
        #expect(throws: KeyAuthError.self) { try AccountStore.defaultHome(environment: [:]) }
    }
}
