import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

/// A private keyauth home for one simulated machine, driving the built `keyauth` binary.
///
/// A machine has no TPM unless it is given one: `KEYAUTH_TPM_TCTI` points nowhere, so that
/// `--key-store auto` (the default) makes key files as on a machine without a TPM, whatever
/// the machine running the tests has.
struct Machine {
    let home: TemporaryDirectory
    /// The TCTI in the machine's environment.
    let tcti: String

    init(tcti: String = SoftwareTPM.absentTCTI) {
        home = TemporaryDirectory("keyauth-e2e")
        self.tcti = tcti
    }

    /// A machine whose TPM is `tpm`.
    init(tpm: SoftwareTPM) {
        self.init(tcti: tpm.tcti)
    }

    var environment: [String: String] {
        [
            "KEYAUTH_HOME": home.path, "HOME": home.path, "PATH": "/usr/bin:/bin", "KEYAUTH_TIMEOUT": "5",
            "LANG": "C.UTF-8", TPMConnection.environmentVariable: tcti,
        ]
    }

    /// Runs `keyauth` with `arguments`, adding `extraEnvironment` to the machine's environment.
    func run(
        _ arguments: [String], standardInput: String = "", extraEnvironment: [String: String] = [:],
        timeout: TimeInterval = 60
    ) throws -> CommandResult {
        try runProcess(
            Binaries.keyauth, arguments, environment: environment.merging(extraEnvironment) { $1 },
            standardInput: standardInput, timeout: timeout)
    }

    /// Registers `user` with a 2048-bit key: without a presence check, or with `pin` on standard
    /// input.
    func register(_ server: KeyAuthServerProcess, user: String, extra: [String] = [], pin: String? = nil) throws
        -> CommandResult
    {
        try register(url: server.url, user: user, extra: extra, pin: pin)
    }

    /// ``register(_:user:extra:pin:)`` for a server at `url`.
    func register(url: String, user: String, extra: [String] = [], pin: String? = nil) throws -> CommandResult {
        let presence = pin == nil ? ["--presence", "none"] : ["--pin-stdin"]
        return try run(
            ["register", "--server", url, "--user", user, "--bits", "2048"] + presence + extra,
            standardInput: pin.map { $0 + "\n" } ?? "")
    }

    var accounts: AccountStore { AccountStore(home: home.path) }

    /// A machine with one active default account for alice on `server`, holding
    /// ``TestKeys/first`` in a key file: encrypted with `pin` when given (presence `pin`),
    /// with no presence check otherwise. Nothing is registered anywhere.
    static func withStoredAccount(server: String, pin: String? = nil) throws -> Machine {
        let machine = Machine()
        let accounts = machine.accounts
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server)
        try accounts.save(
            KeyAuthAccount(
                name: name, serverURL: server, issuer: server, user: "alice", deviceName: "laptop",
                keyID: TestKeys.first.publicKey.fingerprint, presence: pin == nil ? .none : .pin, status: .active))
        try accounts.keyPairStore(for: name).store(TestKeys.first, pin: pin.map { SecretBytes(utf8: $0) })
        try accounts.setDefaultAccount(name)
        return machine
    }

    func keyDirectory() throws -> String {
        try accounts.directory(for: try accounts.resolve(nil))
    }
}

/// Runs `body` with a fresh `keyauth-server` (given `extraArguments`) and removes everything
/// afterwards.
func withServer(extraArguments: [String] = [], _ body: (KeyAuthServerProcess) throws -> Void) throws {
    let directory = TemporaryDirectory("keyauth-server")
    defer { directory.remove() }
    let server = try KeyAuthServerProcess.started(in: directory.path, extraArguments: extraArguments)
    defer { server.terminate() }
    do {
        try body(server)
    } catch {
        Issue.record("server log:\n\(server.log)")
        throw error
    }
}
