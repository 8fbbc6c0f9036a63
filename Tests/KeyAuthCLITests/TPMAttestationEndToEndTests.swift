import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

/// `keyauth register` against the built `keyauth-server`, with software TPMs that `swtpm_setup
/// --create-ek-cert` manufactured with `swtpm-localca` as their vendor: the tier each device gets,
/// and where it is shown.
@Suite("Attested registration with the built binaries and swtpm", .serialized, .timeLimit(.minutes(10)))
struct TPMAttestationEndToEndTests {
    /// Runs `body` with a server (given `extraArguments`) and the path of its database.
    private func withServer(
        extraArguments: [String] = [], _ body: (KeyAuthServerProcess, String) throws -> Void
    ) throws {
        let directory = TemporaryDirectory("keyauth-attest-server")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess.started(in: directory.path, extraArguments: extraArguments)
        defer { server.terminate() }
        do {
            try body(server, directory.path + "/server.db")
        } catch {
            Issue.record("server log:\n\(server.log)")
            throw error
        }
    }

    /// The tier `keyauth status --json` and `keyauth devices --json` show for the machine's device.
    private func clientTiers(_ machine: Machine) throws -> (status: String?, devices: String?) {
        let status = try machine.run(["status", "--json"])
        let account = try JSONValue(parsing: Array(status.standardOutput.utf8))["accounts"]?.arrayValue?.first
        let devices = try machine.run(["devices", "--json"])
        #expect(devices.status == 0, "\(devices.standardError)")
        let entry = try JSONValue(parsing: Array(devices.standardOutput.utf8))["devices"]?.arrayValue?.first
        return (account?["tier"]?.stringValue, entry?["tier"]?.stringValue)
    }

    @Test(
        "a TPM of a trusted vendor registers as attested, of an unknown vendor as tpm-unverified, a key file as software"
    )
    func tiers() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        // The vendor's root and intermediate in a directory of their own, as an operator keeps them.
        let roots = try vendorRoots(of: tpm)
        defer { roots.remove() }

        try withServer(extraArguments: ["--tpm-ca", roots.path]) { server, database in
            let machine = Machine(tpm: tpm)
            defer { machine.home.remove() }
            let registered = try machine.register(server, user: "alice", extra: ["--key-store", "tpm"], pin: "2468")
            try #require(registered.status == 0, "\(registered.standardError)")
            let kid = try #require(try machine.accounts.load(try machine.accounts.resolve(nil)).keyID)
            #expect(try serverTiers(database)[kid] == "attested")
            let (status, devices) = try clientTiers(machine)
            #expect(status == "attested")
            #expect(devices == "attested")
            let text = try machine.run(["status"])
            #expect(text.standardOutput.contains("  tier:        attested (as the server recorded it)\n"))
            let audit = try KeyAuthServerProcess.runCommand(["audit", "--db", database, "--config", "/dev/null"])
            #expect(audit.output.contains("attest"), "\(audit.output)")
        }

        try withServer { server, database in
            let machine = Machine(tpm: tpm)
            defer { machine.home.remove() }
            let registered = try machine.register(server, user: "alice", extra: ["--key-store", "tpm"], pin: "2468")
            try #require(registered.status == 0, "\(registered.standardError)")
            let kid = try #require(try machine.accounts.load(try machine.accounts.resolve(nil)).keyID)
            #expect(try serverTiers(database)[kid] == "tpm-unverified")
            #expect(try clientTiers(machine).status == "tpm-unverified")
            let audit = try KeyAuthServerProcess.runCommand(["audit", "--db", database, "--config", "/dev/null"])
            #expect(audit.output.contains("tpm-unverified: the endorsement key certificate does not verify"))

            let fileMachine = Machine(tcti: SoftwareTPM.absentTCTI)
            defer { fileMachine.home.remove() }
            let file = try fileMachine.register(server, user: "bob", extra: ["--key-store", "file"])
            try #require(file.status == 0, "\(file.standardError)")
            let fileKID = try #require(try fileMachine.accounts.load(try fileMachine.accounts.resolve(nil)).keyID)
            #expect(try serverTiers(database)[fileKID] == "software")
            #expect(try clientTiers(fileMachine).devices == "software")
        }
    }
}

/// `--device-policy attested` with the built binaries: who is refused, and what they are told.
@Suite("Device policy with the built binaries and swtpm", .serialized, .timeLimit(.minutes(10)))
struct DevicePolicyEndToEndTests {
    @Test(
        "under attested a key file and an unverified TPM are refused at registration, and a device of before at login")
    func attestedPolicy() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let directory = TemporaryDirectory("keyauth-policy-server")
        defer { directory.remove() }

        // First without a policy: a key file registers.
        let fileMachine = Machine(tcti: SoftwareTPM.absentTCTI)
        defer { fileMachine.home.remove() }
        do {
            let server = try KeyAuthServerProcess.started(in: directory.path)
            defer { server.terminate() }
            let file = try fileMachine.register(server, user: "bob", extra: ["--key-store", "file"])
            try #require(file.status == 0, "\(file.standardError)")
        }

        // Then the same database under attested, with no trusted roots: nobody qualifies.
        let server = try KeyAuthServerProcess.started(
            in: directory.path, extraArguments: ["--device-policy", "attested"])
        defer { server.terminate() }
        // The restarted server listens on another port: point the account at it.
        var account = try fileMachine.accounts.load(try fileMachine.accounts.resolve(nil))
        account.serverURL = server.url
        account.issuer = server.url
        try fileMachine.accounts.save(account)
        let login = try fileMachine.run(["login"])
        #expect(login.status != 0)
        #expect(login.standardError.contains("device policy (attested) refuses the login"), "\(login.standardError)")
        #expect(login.standardError.contains("keyauth register --key-store tpm"))

        let newFile = Machine(tcti: SoftwareTPM.absentTCTI)
        defer { newFile.home.remove() }
        let refusedFile = try newFile.register(server, user: "carol", extra: ["--key-store", "file"])
        #expect(refusedFile.status != 0)
        #expect(refusedFile.standardError.contains("its tier is software"), "\(refusedFile.standardError)")

        let tpmMachine = Machine(tpm: tpm)
        defer { tpmMachine.home.remove() }
        let refusedTPM = try tpmMachine.register(server, user: "dave", extra: ["--key-store", "tpm"], pin: "2468")
        #expect(refusedTPM.status != 0)
        #expect(refusedTPM.standardError.contains("its tier is tpm-unverified"), "\(refusedTPM.standardError)")
    }
}

/// `keyauth attest` with the built binaries: a device that registered before the server trusted
/// its TPM's maker proves it again, without a new key, and the policy then admits it.
@Suite("keyauth attest with the built binaries and swtpm", .serialized, .timeLimit(.minutes(10)))
struct AttestCommandEndToEndTests {
    /// Points the machine's account at `server`: a restarted server listens on another port.
    private func follow(_ machine: Machine, to server: KeyAuthServerProcess) throws {
        var account = try machine.accounts.load(try machine.accounts.resolve(nil))
        account.serverURL = server.url
        account.issuer = server.url
        try machine.accounts.save(account)
    }

    @Test(
        "a tpm-unverified device refused by the attested policy attests after the root is configured, and logs in")
    func attestAfterRootConfigured() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let roots = try vendorRoots(of: tpm)
        defer { roots.remove() }
        let directory = TemporaryDirectory("keyauth-attest-command")
        defer { directory.remove() }
        let database = directory.path + "/server.db"
        let tpmMachine = Machine(tpm: tpm)
        defer { tpmMachine.home.remove() }
        let fileMachine = Machine(tcti: SoftwareTPM.absentTCTI)
        defer { fileMachine.home.remove() }

        // Registered while the server knows no TPM maker: tpm-unverified, and a key file.
        let kid: String
        let alice: String
        do {
            let server = try KeyAuthServerProcess.started(in: directory.path)
            defer { server.terminate() }
            let registered = try tpmMachine.register(server, user: "alice", extra: ["--key-store", "tpm"], pin: "2468")
            try #require(registered.status == 0, "\(registered.standardError)")
            kid = try #require(try tpmMachine.accounts.load(try tpmMachine.accounts.resolve(nil)).keyID)
            alice = try tpmMachine.accounts.resolve(nil)
            let file = try fileMachine.register(server, user: "bob", extra: ["--key-store", "file"])
            try #require(file.status == 0, "\(file.standardError)")
        }
        #expect(try serverTiers(database)[kid] == "tpm-unverified")

        // The operator adds the maker's root and requires attested devices.
        do {
            let server = try KeyAuthServerProcess.started(
                in: directory.path, extraArguments: ["--tpm-ca", roots.path, "--device-policy", "attested"])
            defer { server.terminate() }
            try follow(tpmMachine, to: server)
            try follow(fileMachine, to: server)
            let refused = try tpmMachine.run(["login", "--pin-stdin"], standardInput: "2468\n")
            #expect(refused.status == 77)
            #expect(
                refused.standardError.hasSuffix(
                    "run `keyauth attest` if the key is in a TPM, else register again with `keyauth register "
                        + "--key-store tpm`\n"), "\(refused.standardError)")
            // The policy refuses it for now: the device stays registered, and deleting the key
            // here (`--local-only`) would leave it so with nobody to revoke it.
            #expect(!refused.standardError.contains("to start again"), "\(refused.standardError)")

            let attested = try tpmMachine.run(["attest", "--pin-stdin"], standardInput: "2468\n")
            #expect(attested.status == 0, "\(attested.standardError)\n\(server.log)")
            #expect(attested.standardOutput == "Attested account \(alice): tier attested (was tpm-unverified).\n")
            #expect(try serverTiers(database)[kid] == "attested")
            #expect(try tpmMachine.accounts.load(try tpmMachine.accounts.resolve(nil)).tier == .attested)
            let audit = try KeyAuthServerProcess.runCommand(["audit", "--db", database, "--config", "/dev/null"])
            #expect(audit.output.contains("attest-device"), "\(audit.output)")
            #expect(audit.output.contains("tpm-unverified -> attested"), "\(audit.output)")

            let login = try tpmMachine.run(["login", "--pin-stdin"], standardInput: "2468\n")
            #expect(login.status == 0, "\(login.standardError)")
            let again = try tpmMachine.run(["attest", "--pin-stdin"], standardInput: "2468\n")
            #expect(
                again.standardOutput == "Attested account \(alice): tier attested, unchanged.\n",
                "\(again.standardError)")

            // A key file has nothing to attest: refused before anything is sent.
            let attestations = server.log.components(separatedBy: "POST /v1/devices/attestation").count
            #expect(attestations > 1, "the server logs each attestation request")
            let file = try fileMachine.run(["attest"])
            #expect(file.status == 1)
            let bob = try fileMachine.accounts.resolve(nil)
            #expect(
                file.standardError.contains(
                    "account \(bob)'s device key is a key file, not a key in a TPM: there is nothing to attest"),
                "\(file.standardError)")
            #expect(
                server.log.components(separatedBy: "POST /v1/devices/attestation").count == attestations,
                "nothing reached the server")
        }

        // Without the root again, the attestation shows less, and the server keeps what it had.
        let server = try KeyAuthServerProcess.started(in: directory.path)
        defer { server.terminate() }
        try follow(tpmMachine, to: server)
        let lower = try tpmMachine.run(["attest", "--pin-stdin"], standardInput: "2468\n")
        #expect(lower.status == 0, "\(lower.standardError)")
        #expect(
            lower.standardOutput
                == "Attested account \(alice): the server keeps tier attested; this attestation showed tpm-unverified "
                + "(the endorsement key certificate does not verify: no TPM root certificate is configured).\n")
        #expect(try serverTiers(database)[kid] == "attested")
    }
}

/// `keyauth-server devices --json` on `database`: each device's tier by key id.
private func serverTiers(_ database: String) throws -> [String: String] {
    let listed = try KeyAuthServerProcess.runCommand([
        "devices", "--json", "--db", database, "--config", "/dev/null",
    ])
    try #require(listed.status == 0, "\(listed.error)")
    var tiers: [String: String] = [:]
    for device in try JSONValue(parsing: Array(listed.output.utf8)).arrayValue ?? [] {
        if let kid = device["kid"]?.stringValue { tiers[kid] = device["tier"]?.stringValue }
    }
    return tiers
}

/// The TPM maker's root and intermediate (swtpm's local CA) in a directory of their own, as an
/// operator keeps them for `--tpm-ca`.
private func vendorRoots(of tpm: SoftwareTPM) throws -> TemporaryDirectory {
    let roots = TemporaryDirectory("keyauth-tpm-ca")
    for path in [tpm.endorsementRootCertificatePath, tpm.endorsementIntermediateCertificatePath] {
        let source = try #require(path)
        try FileManager.default.copyItem(
            atPath: source, toPath: roots.path + "/" + URL(fileURLWithPath: source).lastPathComponent)
    }
    return roots
}
