import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

@Suite("The keyauth home and its accounts")
struct AccountStoreTests {
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
        #expect(fileMode(file) == 0o600)
        try Data("{\"name\":".utf8).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        let error = #expect(throws: KeyAuthError.self) { try accounts.load("alice@example.com") }
        #expect(error?.code == .accountCorrupt)
        #expect(
            error?.message
                == "\(file) is corrupt: it is not valid JSON; restore it from a backup, or delete the account here "
                + "with `keyauth reset --local-only --account alice@example.com` and register again")
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
