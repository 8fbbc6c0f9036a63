import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

/// A harness with accounts `user@server` for each pair, without keys (status needs none).
private func harness(with accounts: [(user: String, server: String)]) throws -> CommandHarness {
    let harness = CommandHarness()
    for (user, server) in accounts {
        let name = AccountStore.defaultAccountName(user: user, serverURL: server)
        try harness.accounts.save(
            KeyAuthAccount(
                name: name, serverURL: server, issuer: server, user: user, deviceName: "laptop", presence: .none,
                status: .active))
    }
    return harness
}

@Suite("Choosing an account: short names, unknown names, the default")
struct AccountChoiceTests {
    @Test("--account takes the user name alone when one account starts with it")
    func shortName() async throws {
        let harness = try harness(with: [("alice", "http://127.0.0.1:8088"), ("bob", "http://127.0.0.1:8088")])
        defer { harness.home.remove() }
        let status = await harness.run(["status", "--account", "bob", "--json"])
        #expect(status.status == 0, "\(status.standardError)")
        let accounts = try JSONValue(parsing: status.standardOutput)["accounts"]?.arrayValue
        #expect(accounts?.count == 1)
        #expect(accounts?.first?["name"]?.stringValue == "bob@127.0.0.1:8088")
        #expect(await harness.run(["status", "--account", "bob@127.0.0.1", "--json"]).status == 0)
    }

    @Test("a short name shared by two accounts lists both and is a usage error")
    func ambiguousShortName() async throws {
        let harness = try harness(with: [("alice", "http://127.0.0.1:8088"), ("alice", "http://127.0.0.1:9099")])
        defer { harness.home.remove() }
        let status = await harness.run(["status", "--account", "alice"])
        #expect(status.status == 64)
        expectOneErrorLine(status)
        #expect(status.standardError.contains("alice matches 2 accounts: alice@127.0.0.1:8088, alice@127.0.0.1:9099"))
    }

    @Test("an unknown account lists the ones that exist")
    func unknownAccount() async throws {
        let harness = try harness(with: [("alice", "http://127.0.0.1:8088"), ("bob", "http://127.0.0.1:8088")])
        defer { harness.home.remove() }
        let status = await harness.run(["login", "--account", "carol"])
        #expect(status.status == 1)
        expectOneErrorLine(status)
        #expect(
            status.standardError
                == "keyauth: there is no account named carol; the accounts are alice@127.0.0.1:8088, bob@127.0.0.1:8088\n"
        )
    }

    @Test("keyauth default sets the account used without --account, and prints it")
    func setDefault() async throws {
        let harness = try harness(with: [("alice", "http://127.0.0.1:8088"), ("bob", "http://127.0.0.1:8088")])
        defer { harness.home.remove() }
        let none = await harness.run(["default"])
        #expect(none.standardOutput.hasPrefix("No default account: choose one of "))
        let without = await harness.run(["pubkey"])
        #expect(without.status == 64)
        let set = await harness.run(["default", "bob"])
        #expect(set.status == 0, "\(set.standardError)")
        #expect(set.standardOutput == "The default account is now bob@127.0.0.1:8088.\n")
        #expect(try harness.accounts.defaultAccountName() == "bob@127.0.0.1:8088")
        #expect(await harness.run(["default"]).standardOutput == "bob@127.0.0.1:8088\n")
        let status = await harness.run(["status"])
        #expect(status.standardOutput.contains("bob@127.0.0.1:8088 (default)"))
        #expect(await harness.run(["default", "carol"]).status == 1)
        #expect(try harness.accounts.defaultAccountName() == "bob@127.0.0.1:8088")
    }
}
