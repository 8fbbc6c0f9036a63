import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth ssh cert` against a server that is an SSH CA, and a real `sshd` trusting that CA: the
/// user logs in with the device key and never copies a public key to the host.
@Suite(
    "SSH login with a certificate of the device key", .timeLimit(.minutes(5)),
    .enabled(if: ExternalTools.shouldRun(installed: OpenSSHServer.isInstalled && getuid() == 0)))
struct SSHLoginTests {
    /// A CA key file, a server that issues with it, and a registered device.
    struct Setup {
        let directory: TemporaryDirectory
        let authority: SSHCertificateAuthority
        let server: InProcessKeyAuthServer
        let device: CommandHarness

        /// - Parameter principals: the server's `--ssh-principals-file`, if any.
        init(pin: String? = nil, principals: String? = nil) async throws {
            directory = TemporaryDirectory("keyauth-ssh-login")
            let caFile = directory.path + "/ssh-ca.pem"
            authority = try SSHCertificateAuthority.generate(.ed25519)
            try authority.write(to: caFile)
            var principalsFile: String?
            if let principals {
                principalsFile = directory.path + "/principals"
                try principals.write(toFile: directory.path + "/principals", atomically: true, encoding: .utf8)
                chmod(directory.path + "/principals", 0o644)
            }
            server = try InProcessKeyAuthServer(sshCAKeyFile: caFile, sshPrincipalsFile: principalsFile)
            device = CommandHarness()
            let registered =
                if let pin {
                    await device.run(
                        ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
                        standardInput: pin + "\n")
                } else {
                    await device.registerUnattended(server.url)
                }
            try #require(registered.status == 0, "\(registered.standardError)")
        }

        var keyDirectory: String {
            get throws {
                let name = try #require(device.accounts.accountNames().first)
                return try device.accounts.keyPairStore(for: name).directory
            }
        }

        /// Where the revocation list that hosts check is kept.
        var revocationListPath: String { directory.path + "/revoked.krl" }

        /// Fetches the server's revocation list into ``revocationListPath``, as a host's timer does.
        func fetchRevocationList() throws {
            let fetched = try ExternalCommand.run(
                ["curl", "-fsS", "-o", revocationListPath, server.url + "/v1/ssh/krl"], timeout: 30)
            try #require(fetched.status == 0, "\(fetched.errorOutput)")
        }

        /// A host that trusts the first CA's line (and keeps it), lets alice in as root, and
        /// checks ``revocationListPath``.
        func hostCheckingRevocations() throws -> OpenSSHServer {
            try OpenSSHServer(
                caLine: authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["alice"]],
                revokedKeys: revocationListPath)
        }

        /// Gets a certificate and the revocation list, and starts ``hostCheckingRevocations()``,
        /// which lets the certificate in (the list names no revoked device yet).
        func hostLettingTheCertificateIn() async throws -> OpenSSHServer {
            #expect(await device.run(["ssh", "cert"]).status == 0)
            try fetchRevocationList()
            let host = try hostCheckingRevocations()
            let before = try host.login(as: "root", identity: try keyDirectory + "/device-key.pem")
            #expect(before.status == 0, "\(before.errorOutput)\n\(host.log)")
            return host
        }

        /// Revokes the account's own device with `keyauth devices revoke`.
        func revokeOwnDevice() async throws {
            let status = await device.run(["status", "--json"])
            let accounts = try JSONValue(parsing: status.standardOutput)["accounts"]?.arrayValue
            let ownKeyID = try #require(accounts?.first?["kid"]?.stringValue)
            let revoked = await device.run(["devices", "revoke", ownKeyID])
            #expect(revoked.status == 0, "\(revoked.standardError)")
        }

        /// Expects the saved certificate revoked by the list (`ssh-keygen -Q`) and refused by
        /// `host`, which logs why.
        func expectCertificateRefused(by host: OpenSSHServer) throws {
            let keys = try keyDirectory
            let checked = try ExternalCommand.run(
                ["ssh-keygen", "-Q", "-f", revocationListPath, keys + "/device-key.pem-cert.pub"], timeout: 30)
            #expect(checked.output.contains("REVOKED"), "\(checked.output)\(checked.errorOutput)")
            let refused = try host.login(as: "root", identity: keys + "/device-key.pem")
            #expect(refused.status == 255, "\(refused.errorOutput)\n\(host.log)")
            #expect(host.log.contains("revoked"), "\(host.log)")
        }

        func remove() {
            server.stop()
            device.home.remove()
            directory.remove()
        }
    }

    @Test("ssh cert saves a 0600 certificate of the device key; sshd lets in its principal and no other")
    func logsInWithTheCertificate() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        let issued = await setup.device.run(["ssh", "cert"])
        #expect(issued.status == 0, "\(issued.standardError)")
        #expect(issued.standardOutput.hasPrefix("ssh-rsa-cert-v01@openssh.com "))
        #expect(issued.standardError.contains("SSH certificate for alice saved to"))
        let keys = try setup.keyDirectory
        let certificate = keys + "/device-key.pem-cert.pub"
        #expect(fileMode(certificate) == 0o600)
        #expect(try String(contentsOfFile: certificate, encoding: .utf8) == issued.standardOutput)

        let config = await setup.device.run(["ssh", "config"])
        #expect(config.status == 0)
        #expect(config.standardOutput.contains("IdentityFile \(keys)/device-key.pem"))
        #expect(config.standardOutput.contains(certificate))
        #expect(config.standardOutput.contains("IdentityAgent ${XDG_RUNTIME_DIR}/keyauth/ssh-agent.sock"))

        let host = try OpenSSHServer(
            caLine: setup.authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["alice"]])
        defer { host.stop() }
        // ssh finds the certificate beside the key, as `keyauth ssh config`'s lines rely on.
        let login = try host.login(as: "root", identity: keys + "/device-key.pem")
        #expect(login.status == 0, "\(login.errorOutput)\n\(host.log)")
        #expect(login.output == "logged-in\n")
        #expect(host.log.contains("Accepted certificate ID \"keyauth user alice device"))

        // A host where root accepts only bob's principal refuses alice's certificate.
        let other = try OpenSSHServer(
            caLine: setup.authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["bob"]])
        defer { other.stop() }
        let refused = try other.login(as: "root", identity: keys + "/device-key.pem")
        #expect(refused.status == 255)
        #expect(refused.output.isEmpty)
    }

    @Test("once the device is revoked, the server's KRL makes sshd refuse its live certificate")
    func revocationList() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        let host = try await setup.hostLettingTheCertificateIn()
        defer { host.stop() }

        try await setup.revokeOwnDevice()
        try setup.fetchRevocationList()
        try setup.expectCertificateRefused(by: host)
    }

    @Test("a principal taken out of the principals file: sshd refuses the live certificate naming it, not the next one")
    func removedPrincipal() async throws {
        let setup = try await Setup(principals: "user alice: deploy backup\n")
        defer { setup.remove() }
        #expect(await setup.device.run(["ssh", "cert"]).status == 0)
        try setup.fetchRevocationList()
        let host = try OpenSSHServer(
            caLine: setup.authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["backup"]],
            revokedKeys: setup.revocationListPath)
        defer { host.stop() }
        let identity = try setup.keyDirectory + "/device-key.pem"
        let before = try host.login(as: "root", identity: identity)
        #expect(before.status == 0, "\(before.errorOutput)\n\(host.log)")

        // deploy goes at the server's next cleanup: the certificate that names it opens no host,
        // not even through backup, which alice keeps.
        try "user alice: backup\n".write(
            toFile: setup.directory.path + "/principals", atomically: true, encoding: .utf8)
        chmod(setup.directory.path + "/principals", 0o644)
        setup.server.runCleanup()
        try setup.fetchRevocationList()
        try setup.expectCertificateRefused(by: host)

        // The next certificate names what alice has now, and the same list lets it in.
        let renewed = await setup.device.run(["ssh", "cert"])
        #expect(
            renewed.standardError.contains("SSH certificate for alice, backup saved to"), "\(renewed.standardError)")
        try setup.fetchRevocationList()
        let after = try host.login(as: "root", identity: identity)
        #expect(after.status == 0, "\(after.errorOutput)\n\(host.log)")
    }

    @Test(
        "after ssh-ca rotate, sshd trusting both lines lets in the old CA's certificate and the new one's; after retire, only the new"
    )
    func rotation() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        let keys = try setup.keyDirectory
        #expect(await setup.device.run(["ssh", "cert"]).status == 0)
        let oldCertificate = setup.directory.path + "/old-cert.pub"
        try FileManager.default.copyItem(atPath: keys + "/device-key.pem-cert.pub", toPath: oldCertificate)

        let caFile = setup.directory.path + "/ssh-ca.pem"
        let rotated = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "rotate", "--alg", "ecdsa", "--ssh-ca-key-file", caFile], timeout: 60)
        #expect(rotated.status == 0, "\(rotated.errorOutput)")
        setup.server.runCleanup()
        func publishedLines() throws -> String {
            let fetched = try ExternalCommand.run(["curl", "-fsS", setup.server.url + "/v1/ssh/ca"])
            try #require(fetched.status == 0, "\(fetched.errorOutput)")
            return fetched.output
        }
        let overlap = try publishedLines()
        #expect(overlap == rotated.output)
        #expect(overlap.split(separator: "\n").count == 2)

        // A host that fetched the CA lines during the overlap trusts both.
        let host = try OpenSSHServer(
            caLine: overlap.trimmingCharacters(in: .newlines), principals: ["root": ["alice"]])
        defer { host.stop() }
        let withOld = try host.login(as: "root", identity: keys + "/device-key.pem", certificate: oldCertificate)
        #expect(withOld.status == 0, "\(withOld.errorOutput)\n\(host.log)")
        #expect(await setup.device.run(["ssh", "cert"]).status == 0)
        let newCertificate = keys + "/device-key.pem-cert.pub"
        let described = try ExternalCommand.run(["ssh-keygen", "-L", "-f", newCertificate])
        #expect(described.output.contains("Signing CA: ECDSA "), "\(described.output)")
        let withNew = try host.login(as: "root", identity: keys + "/device-key.pem")
        #expect(withNew.status == 0, "\(withNew.errorOutput)\n\(host.log)")

        let retired = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "retire", "--ssh-ca-key-file", caFile], timeout: 60)
        #expect(retired.status == 0, "\(retired.errorOutput)")
        setup.server.runCleanup()
        let after = try publishedLines()
        #expect(after.split(separator: "\n").count == 1)
        #expect(after.hasPrefix("ecdsa-sha2-nistp256 "))
        // A host that fetched the lines after the retirement lets in only the new CA's certificates.
        let refreshed = try OpenSSHServer(
            caLine: after.trimmingCharacters(in: .newlines), principals: ["root": ["alice"]])
        defer { refreshed.stop() }
        let oldRefused = try refreshed.login(
            as: "root", identity: keys + "/device-key.pem", certificate: oldCertificate)
        #expect(oldRefused.status == 255)
        let newAccepted = try refreshed.login(as: "root", identity: keys + "/device-key.pem")
        #expect(newAccepted.status == 0, "\(newAccepted.errorOutput)\n\(refreshed.log)")
    }

    @Test("after delete-user, a device revoked before stays in the KRL, and sshd keeps refusing its live certificate")
    func deletedUserStaysRevoked() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        #expect(await setup.device.run(["ssh", "cert"]).status == 0)
        // The list as `keyauth-server ssh-ca krl` writes it from the database.
        func writeList() throws {
            let written = try ExternalCommand.run(
                [
                    Binaries.server, "ssh-ca", "krl", setup.revocationListPath, "--ssh-ca-key-file",
                    setup.directory.path + "/ssh-ca.pem", "--db", setup.server.databasePath,
                ], timeout: 60)
            try #require(written.status == 0, "\(written.errorOutput)")
        }
        try await setup.revokeOwnDevice()
        try writeList()
        let host = try setup.hostCheckingRevocations()
        defer { host.stop() }
        try setup.expectCertificateRefused(by: host)

        let deleted = try ExternalCommand.run(
            [Binaries.server, "delete-user", "alice", "--db", setup.server.databasePath], timeout: 60)
        #expect(deleted.status == 0, "\(deleted.errorOutput)")
        try writeList()
        try setup.expectCertificateRefused(by: host)
    }

    @Test(
        "after ssh-ca rotate --overlap 0s, a revoked device's key is in the list itself, so its certificates stay refused under any CA"
    )
    func revocationOutlivesTheOldAuthority() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        // A host set up once with the old CA's line, which it keeps after the rotation.
        let host = try await setup.hostLettingTheCertificateIn()
        defer { host.stop() }

        let caFile = setup.directory.path + "/ssh-ca.pem"
        let rotated = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "rotate", "--overlap", "0s", "--ssh-ca-key-file", caFile], timeout: 60)
        #expect(rotated.status == 0, "\(rotated.errorOutput)")
        setup.server.runCleanup()
        // The device's own key, as OpenSSH names it: the list revokes it only once the device is
        // revoked (the old CA, unpublished at once, is revoked whole already).
        let converted = try ExternalCommand.run(
            ["ssh-keygen", "-i", "-m", "PKCS8", "-f", try setup.keyDirectory + "/device-key.pub"], timeout: 30)
        try #require(converted.status == 0, "\(converted.errorOutput)")
        let plainKey = setup.directory.path + "/device.pub"
        try converted.output.write(toFile: plainKey, atomically: true, encoding: .utf8)
        func keyIsRevoked() throws -> Bool {
            try setup.fetchRevocationList()
            let queried = try ExternalCommand.run(["ssh-keygen", "-Q", "-f", setup.revocationListPath, plainKey])
            return queried.output.contains("REVOKED")
        }
        #expect(try !keyIsRevoked())
        try await setup.revokeOwnDevice()
        #expect(try keyIsRevoked())
        try setup.expectCertificateRefused(by: host)
    }

    @Test(
        "after ssh-ca rotate and retire, a host that kept the old CA's line refuses its certificate of an active device once it fetches the list"
    )
    func retiredAuthorityIsRevoked() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        let host = try await setup.hostLettingTheCertificateIn()
        defer { host.stop() }
        let caFile = setup.directory.path + "/ssh-ca.pem"
        for action in ["rotate", "retire"] {
            let ran = try ExternalCommand.run(
                [Binaries.server, "ssh-ca", action, "--ssh-ca-key-file", caFile], timeout: 60)
            #expect(ran.status == 0, "\(action): \(ran.errorOutput)")
        }
        setup.server.runCleanup()
        try setup.fetchRevocationList()
        try setup.expectCertificateRefused(by: host)
    }

    @Test("with a principals file, the certificate names the mapped principals; sshd lets in a mapped one, not another")
    func mappedPrincipals() async throws {
        let setup = try await Setup(
            principals: "user alice: deploy\ngroup ops: monitoring\nmembers ops: alice bob\nuser bob: backup\n")
        defer { setup.remove() }
        let issued = await setup.device.run(["ssh", "cert"])
        #expect(issued.status == 0, "\(issued.standardError)")
        #expect(
            issued.standardError.contains("SSH certificate for alice, deploy, monitoring saved to"),
            "\(issued.standardError)")
        let keys = try setup.keyDirectory
        let described = try ExternalCommand.run(["ssh-keygen", "-L", "-f", keys + "/device-key.pem-cert.pub"])
        #expect(
            described.output.contains(
                "Principals: \n                alice\n                deploy\n                monitoring\n"),
            "\(described.output)")
        #expect(!described.output.contains("backup"))

        let caLine = setup.authority.publicKeyLine(comment: "keyauth-ca")
        let mapped = try OpenSSHServer(caLine: caLine, principals: ["root": ["deploy"]])
        defer { mapped.stop() }
        let accepted = try mapped.login(as: "root", identity: keys + "/device-key.pem")
        #expect(accepted.status == 0, "\(accepted.errorOutput)\n\(mapped.log)")
        #expect(mapped.log.contains("Accepted certificate ID \"keyauth user alice device"))
        let unmapped = try OpenSSHServer(caLine: caLine, principals: ["root": ["backup", "ops"]])
        defer { unmapped.stop() }
        let refused = try unmapped.login(as: "root", identity: keys + "/device-key.pem")
        #expect(refused.status == 255)
        #expect(refused.output.isEmpty)
    }

    @Test("sshd refuses an expired certificate and one signed by another CA")
    func refusesExpiredAndForeign() async throws {
        let setup = try await Setup()
        defer { setup.remove() }
        let keys = try setup.keyDirectory
        let publicKey = try RSAPublicKey(
            pemRepresentation: Array(try String(contentsOfFile: keys + "/device-key.pub", encoding: .utf8).utf8))
        let now = UInt64(time(nil))
        func certificate(_ authority: SSHCertificateAuthority, validBefore: UInt64, name: String) throws -> String {
            let line = try SSHUserCertificate(
                publicKey: .rsa(publicKey), serial: 1, keyID: "test", principals: ["alice"],
                validAfter: now - 7200, validBefore: validBefore, extensions: ["permit-pty": ""]
            ).line(signedBy: authority, nonce: Array(repeating: 3, count: 32), comment: name)
            let path = setup.directory.path + "/\(name)-cert.pub"
            try (line + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        let host = try OpenSSHServer(
            caLine: setup.authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["alice"]])
        defer { host.stop() }
        let valid = try host.login(
            as: "root", identity: keys + "/device-key.pem",
            certificate: try certificate(setup.authority, validBefore: now + 600, name: "valid"))
        #expect(valid.status == 0, "\(valid.errorOutput)")
        let expired = try host.login(
            as: "root", identity: keys + "/device-key.pem",
            certificate: try certificate(setup.authority, validBefore: now - 60, name: "expired"))
        #expect(expired.status == 255)
        let foreign = try host.login(
            as: "root", identity: keys + "/device-key.pem",
            certificate: try certificate(
                try SSHCertificateAuthority.generate(.ed25519), validBefore: now + 600, name: "foreign"))
        #expect(foreign.status == 255)
        #expect(
            host.log.contains("expired") || host.log.contains("not yet valid")
                || host.log.contains("Certificate invalid"))
    }

    @Test("with a PIN-protected key file, ssh asks for the PIN as the key's passphrase")
    func pinIsThePassphrase() async throws {
        let setup = try await Setup(pin: "482916")
        defer { setup.remove() }
        let issued = await setup.device.run(["ssh", "cert", "--pin-stdin"], standardInput: "482916\n")
        #expect(issued.status == 0, "\(issued.standardError)")
        let keys = try setup.keyDirectory
        let host = try OpenSSHServer(
            caLine: setup.authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["alice"]])
        defer { host.stop() }
        let login = try host.login(
            as: "root", identity: keys + "/device-key.pem", askPass: "482916")
        #expect(login.status == 0, "\(login.errorOutput)")
        let wrong = try host.login(
            as: "root", identity: keys + "/device-key.pem", askPass: "000000")
        #expect(wrong.status == 255)
    }

    @Test("a server that is no SSH CA says so in one line, and ssh needs an action")
    func refusals() async throws {
        let plain = try InProcessKeyAuthServer()
        defer { plain.stop() }
        let device = CommandHarness()
        defer { device.home.remove() }
        #expect(await device.registerUnattended(plain.url).status == 0)
        let refused = await device.run(["ssh", "cert"])
        #expect(refused.status == 1)
        expectOneErrorLine(refused)
        #expect(refused.standardError.contains("--ssh-ca-key-file"), "\(refused.standardError)")
        #expect(await device.run(["ssh", "frob"]).status == 64)
    }
}
