import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The directories keyauth makes for an account's secrets, `accounts/` and `accounts/<name>`,
/// are held to 0700 when read: a looser one is refused with the fix.
@Suite("keyauth account directories", .timeLimit(.minutes(5)))
struct AccountDirectoryTests {
    @Test("a loose accounts/ or account directory stops commands with exit 65 and chmod 700")
    func looseDirectoriesRefused() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await harness.registerUnattended(server.url).status == 0)
        let name = try harness.accounts.resolve(nil)
        let accounts = harness.accounts.accountsDirectory
        let directory = try harness.accounts.directory(for: name)
        for loose in [accounts, directory] {
            #expect(chmod(loose, 0o755) == 0)
            let login = await harness.run(["login"])
            #expect(login.status == 65, "\(login.standardError)")
            #expect(login.standardError.contains("chmod 700 \(loose)"), "\(login.standardError)")
            #expect(chmod(loose, 0o700) == 0)
        }
        #expect(await harness.run(["login"]).status == 0)
    }

    @Test("saving an account under an accounts/ of another user is refused")
    func otherOwnerRefusedOnWrite() async throws {
        guard geteuid() == 0 else { return }  // only root can give a directory away
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let accounts = harness.accounts.accountsDirectory
        try FileManager.default.createDirectory(atPath: accounts, withIntermediateDirectories: true)
        #expect(chown(accounts, 65534, 65534) == 0)
        let account = KeyAuthAccount(
            name: "alice@example.test", serverURL: "https://example.test", issuer: "https://example.test",
            user: "alice", deviceName: "box", presence: .none, keyStore: .file)
        #expect(throws: KeyAuthError.self) { try harness.accounts.save(account) }
        #expect(!FileManager.default.fileExists(atPath: accounts + "/alice@example.test"))
    }
}
