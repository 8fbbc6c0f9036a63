import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

@Suite("The built keyauth binary on its own", .timeLimit(.minutes(10)))
struct BinaryTests {
    @Test("usage errors exit 64 with one line, and --version works")
    func usage() throws {
        let home = TemporaryDirectory("keyauth-bin")
        defer { home.remove() }
        let environment = ["KEYAUTH_HOME": home.path, "HOME": home.path]
        for arguments in [[], ["nope"], ["login", "--bogus"], ["register", "--server"], ["register", "--user", "x"]] {
            let result = try runProcess(Binaries.keyauth, arguments, environment: environment)
            #expect(result.status == 64, "\(arguments)")
            expectOneErrorLine(result)
        }
        let version = try runProcess(Binaries.keyauth, ["--version"], environment: environment)
        #expect(version.status == 0)
        #expect(version.standardOutput.hasPrefix("keyauth "))
    }

    @Test("an unreachable server exits 69 and leaves no account behind")
    func unreachable() throws {
        let home = TemporaryDirectory("keyauth-bin")
        defer { home.remove() }
        let closed = ClosedPort()
        let port = closed.port
        let result = try runProcess(
            Binaries.keyauth,
            [
                "register", "--server", "http://127.0.0.1:\(port)", "--user", "x", "--presence", "none", "--bits",
                "2048",
            ],
            environment: [
                "KEYAUTH_HOME": home.path, "HOME": home.path, TPMConnection.environmentVariable: SoftwareTPM.absentTCTI,
            ])
        #expect(result.status == 69)
        expectOneErrorLine(result)
        #expect(AccountStore(home: home.path).accountNames().isEmpty)
    }
}
