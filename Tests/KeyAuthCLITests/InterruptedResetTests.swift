import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A `keyauth reset` that stops halfway (a kill, a file that cannot be unlinked) leaves what
/// running it again finishes, and `keyauth status` says what is left, as it does for an account
/// file that cannot be read.
@Suite("An interrupted reset, a missing key, a corrupt account", .timeLimit(.minutes(10)))
struct InterruptedResetTests {
    /// A home with one active account on a server that is never asked: key file, token, default.
    private func homeWithAccount() throws -> (CommandHarness, String) {
        let harness = CommandHarness()
        let server = "https://auth.example.test"
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server)
        try harness.accounts.save(
            KeyAuthAccount(
                name: name, serverURL: server, issuer: server, user: "alice", deviceName: "laptop",
                keyID: TestKeys.first.publicKey.fingerprint, presence: .none, status: .active))
        try harness.accounts.keyPairStore(for: name).store(TestKeys.first, pin: nil)
        try harness.accounts.credentials.saveToken(
            AccessToken(value: "a.b.c", expiresAt: Date().addingTimeInterval(600)), account: name)
        try harness.accounts.setDefaultAccount(name)
        return (harness, name)
    }

    @Test("a token that cannot be removed stops the reset before the key, and reset finishes once it can")
    func tokenBeforeKey() async throws {
        let (harness, name) = try homeWithAccount()
        defer { harness.home.remove() }
        let directory = try harness.accounts.directory(for: name)
        // A non-empty directory where token.json belongs cannot be unlinked, even by root.
        try FileManager.default.removeItem(atPath: directory + "/token.json")
        try FileManager.default.createDirectory(
            atPath: directory + "/token.json/stuck", withIntermediateDirectories: true)
        let failed = await harness.run(["reset", "--local-only", "--yes"])
        #expect(failed.status == 1, "\(failed.standardError)")
        #expect(try harness.accounts.keyPairStore(for: name).hasKey, "the key must outlive the token")
        #expect(harness.accounts.exists(name))

        try FileManager.default.removeItem(atPath: directory + "/token.json")
        let status = await harness.run(["status"])
        #expect(status.status == 0, "\(status.standardError)")
        #expect(status.standardOutput.contains("run `keyauth reset --account \(name)` to finish"))

        let finished = await harness.run(["reset", "--yes"])
        #expect(finished.status == 0, "\(finished.standardError)")
        #expect(finished.standardOutput.contains("Finished deleting account \(name) here"))
        #expect(!FileManager.default.fileExists(atPath: directory))
        #expect(!FileManager.default.fileExists(atPath: harness.home.path + "/default"))
    }

    /// Runs `body` with a home registered (unattended) at a fresh server, and its account's name.
    private func withRegisteredHome(
        _ body: (InProcessKeyAuthServer, CommandHarness, String) async throws -> Void
    ) async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        try #require(await harness.registerUnattended(server.url).status == 0)
        try await body(server, harness, try #require(harness.accounts.accountNames().first))
    }

    @Test("register after a reset killed halfway finishes that removal, and the next reset revokes the new key")
    func registerAfterInterruptedReset() async throws {
        try await withRegisteredHome { server, harness, name in
            let oldKeyID = try harness.accounts.keyPairStore(for: name).loadPublicKey().fingerprint
            // What a reset killed after deleting the key leaves: the device revoked, the marker, the
            // account file.
            try server.setStatus("revoked", of: oldKeyID)
            let directory = try harness.accounts.directory(for: name)
            #expect(FileManager.default.createFile(atPath: directory + "/.removing", contents: nil))
            try harness.accounts.keyPairStore(for: name).reset()
            #expect(harness.accounts.isBeingRemoved(name))

            let code = try server.enrollmentCode(for: "alice")
            let registered = await harness.registerUnattended(server.url, extra: ["--enrollment-code", code])
            #expect(registered.status == 0, "\(registered.standardError)")
            #expect(registered.standardOutput.contains("Finished deleting account \(name) here"))
            #expect(!harness.accounts.isBeingRemoved(name))
            let newKeyID = try harness.accounts.keyPairStore(for: name).loadPublicKey().fingerprint
            #expect(newKeyID != oldKeyID)
            #expect(server.status(of: newKeyID) == "active")

            let reset = await harness.run(["reset", "--yes"])
            #expect(reset.status == 0, "\(reset.standardError)")
            #expect(reset.standardOutput.contains("Revoked device \(newKeyID)"), "\(reset.standardOutput)")
            #expect(server.status(of: newKeyID) == "revoked")
        }
    }

    @Test("registering again after the key was lost drops the old registration's token")
    func registerAgainDropsOldToken() async throws {
        try await withRegisteredHome { server, harness, name in
            let old = try #require(try harness.accounts.credentials.loadToken(account: name))
            try FileManager.default.removeItem(atPath: try harness.accounts.keyPairStore(for: name).privateKeyPath)
            // The user has an active device, so the new one waits for approval.
            let again = await harness.registerUnattended(server.url, extra: ["--no-wait"])
            #expect(again.status == 75, "\(again.standardError)")
            #expect(try harness.accounts.credentials.loadToken(account: name) == nil)
            let token = await harness.run(["token"])
            #expect(!token.standardOutput.contains(old.value))
        }
    }

    @Test("status says when the private key of an account is missing")
    func missingKeyShown() async throws {
        let (harness, name) = try homeWithAccount()
        defer { harness.home.remove() }
        let keys = try harness.accounts.keyPairStore(for: name)
        try FileManager.default.removeItem(atPath: keys.privateKeyPath)
        let status = await harness.run(["status"])
        #expect(status.status == 0, "\(status.standardError)")
        #expect(status.standardOutput.contains("the private key is missing"), "\(status.standardOutput)")
        #expect(status.standardOutput.contains("keyauth reset --account \(name) --local-only"))

        let reset = await harness.run(["reset", "--local-only", "--yes"])
        #expect(reset.status == 0, "\(reset.standardError)")
        #expect(!harness.accounts.exists(name))
    }

    @Test("status shows the other accounts when one account file is corrupt, then exits 65")
    func corruptAccountDoesNotHideOthers() async throws {
        let (harness, name) = try homeWithAccount()
        defer { harness.home.remove() }
        let broken = "bob@auth.example.test"
        try FileManager.default.createDirectory(
            atPath: try harness.accounts.directory(for: broken), withIntermediateDirectories: true)
        let file = try harness.accounts.accountFile(for: broken)
        try Data("{\"name\":".utf8).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        chmod(try harness.accounts.directory(for: broken), 0o700)
        let status = await harness.run(["status"])
        #expect(status.status == 65, "\(status.standardError)")
        #expect(status.standardOutput.contains(name), "\(status.standardOutput)")
        #expect(status.standardOutput.contains("\(broken)\n  problem:     cannot be read"))
        expectOneErrorLine(status)
        #expect(status.standardError.contains("is corrupt"))
        let json = await harness.run(["status", "--json"])
        #expect(json.status == 65)
        #expect(json.standardOutput.contains("\"error\""))
    }

    @Test("status shows the other accounts when one account's token file is too open, then exits 65")
    func openTokenDoesNotHideOthers() async throws {
        let (harness, name) = try homeWithAccount()
        defer { harness.home.remove() }
        let other = "bob@auth.example.test"
        try harness.accounts.save(
            KeyAuthAccount(
                name: other, serverURL: "https://auth.example.test", issuer: "https://auth.example.test",
                user: "bob", deviceName: "laptop", presence: .none, status: .active))
        try harness.accounts.credentials.saveToken(
            AccessToken(value: "d.e.f", expiresAt: Date().addingTimeInterval(600)), account: other)
        #expect(chmod(try harness.accounts.directory(for: other) + "/token.json", 0o644) == 0)
        let status = await harness.run(["status"])
        #expect(status.status == 65, "\(status.standardError)")
        #expect(status.standardOutput.contains("\(name) (default)\n"), "\(status.standardOutput)")
        #expect(status.standardOutput.contains("\(other)\n  problem:     cannot be read"), "\(status.standardOutput)")
        expectOneErrorLine(status)
    }
}
