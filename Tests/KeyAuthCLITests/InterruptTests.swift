import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A keyauth home with one PIN-protected account, whose server is unavailable (503): `keyauth
/// login` reads its discovery answer, asks for the PIN, and then fails at the token request.
private func homeWithPINAccount() throws -> TemporaryDirectory {
    let home = TemporaryDirectory("keyauth-tty")
    let accounts = AccountStore(home: home.path)
    let server = try UnavailableServer.url()
    let name = AccountStore.defaultAccountName(user: "alice", serverURL: server)
    try accounts.save(
        KeyAuthAccount(
            name: name, serverURL: server, issuer: server, user: "alice", deviceName: "laptop",
            keyID: TestKeys.first.publicKey.fingerprint, presence: .pin, status: .active))
    try accounts.keyPairStore(for: name).store(TestKeys.first, pin: SecretBytes(utf8: "135790"))
    try accounts.setDefaultAccount(name)
    return home
}

/// Runs `body` with `keyauth login` started on a fresh terminal and waiting at its PIN prompt,
/// which has turned echo off.
private func withLoginAtPINPrompt(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: (TerminalProcess) throws -> Void
) throws {
    let home = try homeWithPINAccount()
    defer { home.remove() }
    let process = try TerminalProcess(
        Binaries.keyauth, ["login"],
        environment: ["KEYAUTH_HOME": home.path, "HOME": home.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"])
    let shown = process.readUntil("PIN: ")
    #expect(
        shown.hasSuffix("PIN: "), "\(shown.debugDescription) \(process.standardError)", sourceLocation: sourceLocation)
    // The prompt turned echo off: that is what an interrupt must undo.
    #expect(!process.echoIsOn, sourceLocation: sourceLocation)
    try body(process)
}

@Suite("Signals at the PIN prompt, on a real terminal with the built binary", .timeLimit(.minutes(10)))
struct InterruptTests {
    @Test("Control-C at the PIN prompt turns echo back on, ends the line, and exits 130")
    func controlC() throws {
        try withLoginAtPINPrompt { process in
            process.type("\u{03}")  // Control-C, turned into SIGINT by the terminal
            #expect(process.wait() == 130)
            #expect(KeyAuthCommand.interruptedStatus == 130)
            #expect(process.echoIsOn)
            #expect(process.readAvailable(waiting: 500).contains("\n"))
        }
    }

    @Test(
        "SIGTERM and SIGHUP at the PIN prompt also restore the terminal, with 128 + the signal",
        arguments: zip([SIGTERM, SIGHUP], [Int32(143), Int32(129)]))
    func otherSignals(signal: Int32, status: Int32) throws {
        try withLoginAtPINPrompt { process in
            process.signal(signal)
            #expect(process.wait() == status)
            #expect(KeyAuthCommand.status(afterSignal: signal) == status)
            #expect(process.echoIsOn)
            #expect(process.readAvailable(waiting: 500).contains("\n"))
        }
    }

    @Test("the PIN typed on the terminal is not shown, and the right one logs in as far as the server")
    func pinOnTheTerminal() throws {
        try withLoginAtPINPrompt { process in
            process.type("135790\n")
            // The server is unavailable: after the PIN opened the key, the login fails there (69).
            #expect(process.wait() == 69)
            #expect(!process.readAvailable(waiting: 200).contains("135790"))
            #expect(process.echoIsOn)
            #expect(process.standardError.contains("temporarily unavailable"))
        }
    }
}
