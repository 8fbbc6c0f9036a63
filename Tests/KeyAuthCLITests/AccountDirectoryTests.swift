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

    @Test("the default file is read only from a home nobody else can write, never through a symlink")
    func defaultFileTrust() async throws {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let accounts = harness.accounts
        try accounts.setDefaultAccount("alice@example.test")
        #expect(try accounts.defaultAccountName() == "alice@example.test")
        let home = harness.home.path
        let defaultFile = home + "/default"

        #expect(chmod(home, 0o777) == 0)
        let loose = #expect(throws: KeyAuthError.self) { try accounts.defaultAccountName() }
        #expect(loose?.code == .keyUnprotected)
        let status = await harness.run(["status"])
        #expect(status.status == 65, "\(status.standardError)")
        #expect(status.standardError.contains("chmod 700 \(home)"), "\(status.standardError)")
        // Readable is fine: the name is no secret, only replacing it is.
        #expect(chmod(home, 0o755) == 0)
        #expect(try accounts.defaultAccountName() == "alice@example.test")
        #expect(chmod(home, 0o700) == 0)

        if geteuid() == 0 {  // only root can give a directory away
            #expect(chown(home, 65534, 65534) == 0)
            let foreign = #expect(throws: KeyAuthError.self) { try accounts.defaultAccountName() }
            #expect(foreign?.code == .keyUnprotected)
            #expect(chown(home, 0, 0) == 0)
        }

        try "bob@example.test\n".write(toFile: home + "/elsewhere", atomically: false, encoding: .utf8)
        try FileManager.default.removeItem(atPath: defaultFile)
        #expect(symlink(home + "/elsewhere", defaultFile) == 0)
        let linked = #expect(throws: KeyAuthError.self) { try accounts.defaultAccountName() }
        #expect(linked?.code == .keyUnprotected)

        try FileManager.default.removeItem(atPath: defaultFile)
        try String(repeating: "a", count: 5000).write(toFile: defaultFile, atomically: false, encoding: .utf8)
        let large = #expect(throws: KeyAuthError.self) { try accounts.defaultAccountName() }
        #expect(large?.code == .accountCorrupt)

        // The no-tpm note is read the same way: one behind a symlink remembers nothing.
        #expect(symlink(home + "/elsewhere", home + "/no-tpm") == 0)
        #expect(accounts.isFirstNoticeOfMissingTPM(tcti: "bob@example.test"))
    }
}
