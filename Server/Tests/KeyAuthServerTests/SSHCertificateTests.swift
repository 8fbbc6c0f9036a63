import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The SSH user certificate authority: certificates OpenSSH's own parser accepts, for the
/// device's own key only, audited, and a CA key file guarded like the signing key file.
@Suite("SSH user certificates", .timeLimit(.minutes(5)))
struct SSHCertificateTests {
    /// `ssh-keygen -L` on `line`: OpenSSH parses the certificate and checks the CA's signature.
    static func describe(_ line: String, in directory: TemporaryDirectory) throws -> ExternalCommand {
        let path = directory.path + "/cert-\(UUID().uuidString)-cert.pub"
        try (line + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return try ExternalCommand.run(["ssh-keygen", "-L", "-f", path], timeout: 30)
    }

    static func certificate(validBefore: UInt64 = 1_900_000_000) throws -> SSHUserCertificate {
        SSHUserCertificate(
            publicKey: .rsa(try ServerTestKeys.key("alice-1").publicKey), serial: 0xFEDC_BA98_7654_3210,
            keyID: "keyauth user alice device K", principals: ["alice", "ops"], validAfter: 1_800_000_000,
            validBefore: validBefore,
            extensions: ["permit-pty": "", SSHCertificateIssuer.deviceExtension: "K", "permit-agent-forwarding": ""])
    }

    @Test(
        "ssh-keygen reads a certificate signed by each CA type with the principals, serial, validity and extensions",
        arguments: SSHCertificateAuthority.KeyType.allCases)
    func opensshParsesEachCAType(_ type: SSHCertificateAuthority.KeyType) throws {
        let directory = TemporaryDirectory("keyauth-ssh-cert")
        defer { directory.remove() }
        let authority = try SSHCertificateAuthority.generate(type)
        let line = try Self.certificate().line(
            signedBy: authority, nonce: Array(repeating: 7, count: 32), comment: "alice@keyauth")
        #expect(line.hasPrefix("ssh-rsa-cert-v01@openssh.com "))
        let described = try Self.describe(line, in: directory)
        #expect(described.status == 0, "\(described.errorOutput)")
        let text = described.output
        #expect(text.contains("Type: ssh-rsa-cert-v01@openssh.com user certificate"))
        let caName = ["ed25519": "ED25519", "ecdsa": "ECDSA", "rsa": "RSA"][type.rawValue] ?? "?"
        #expect(text.contains("Signing CA: \(caName) "), "\(text)")
        #expect(text.contains("Key ID: \"keyauth user alice device K\""))
        #expect(text.contains("Serial: \(UInt64(0xFEDC_BA98_7654_3210))"))
        #expect(text.contains("                alice\n                ops\n"))
        #expect(text.contains("permit-agent-forwarding\n                permit-pty"))
        #expect(text.contains("device-key@keyauth"))
        #expect(!text.contains("permit-port-forwarding"))

        // The CA's public key line is the key that ssh-keygen reports as the signer.
        let caFile = directory.path + "/ca.pub"
        try (authority.publicKeyLine(comment: "keyauth-ca") + "\n").write(
            toFile: caFile, atomically: true, encoding: .utf8)
        let fingerprint = try ExternalCommand.run(["ssh-keygen", "-l", "-f", caFile], timeout: 30)
        #expect(fingerprint.status == 0, "\(fingerprint.errorOutput)")
        let caHash = fingerprint.output.split(separator: " ").dropFirst().first.map(String.init) ?? "none"
        #expect(text.contains("Signing CA: \(caName) \(caHash)"))
    }

    @Test("a byte changed anywhere in the signed part makes OpenSSH refuse the certificate")
    func tamperingBreaksTheSignature() throws {
        let directory = TemporaryDirectory("keyauth-ssh-cert")
        defer { directory.remove() }
        let authority = try SSHCertificateAuthority.generate(.ed25519)
        var blob = try Self.certificate().encoded(signedBy: authority, nonce: Array(repeating: 1, count: 32))
        // The principal list: "alice" becomes "blice".
        let alice = Array("alice".utf8)
        let at = try #require(
            (0...(blob.count - alice.count)).first { Array(blob[$0..<($0 + alice.count)]) == alice })
        blob[at] = UInt8(ascii: "b")
        let line = "ssh-rsa-cert-v01@openssh.com \(SSHText.base64(blob)) tampered"
        let described = try Self.describe(line, in: directory)
        #expect(described.status != 0)
    }

    @Test("mpints drop leading zeros and keep a zero before a set top bit; base64 is padded")
    func wireEncoding() throws {
        var writer = SSHWireWriter()
        try writer.mpint(unsigned: [0, 0, 0x7F])
        try writer.mpint(unsigned: [0x80, 1])
        try writer.mpint(unsigned: [0, 0])
        #expect(writer.bytes == [0, 0, 0, 1, 0x7F, 0, 0, 0, 3, 0, 0x80, 1, 0, 0, 0, 0])
        #expect(SSHText.base64([0xFB, 0xFF]) == "+/8=")
        #expect(SSHText.base64(Array("ab".utf8)) == "YWI=")
    }

    @Test("the CA key file is written 0600, never replaced, and refused when others may read it")
    func caKeyFile() throws {
        let directory = TemporaryDirectory("keyauth-ssh-ca")
        defer { directory.remove() }
        let path = directory.path + "/ssh-ca.pem"
        let authority = try SSHCertificateAuthority.generate(.ed25519)
        try authority.write(to: path)
        #expect(fileMode(path).map { $0 & 0o777 } == 0o600)
        #expect(try SSHCertificateAuthority.load(file: path).publicKeyBlob == authority.publicKeyBlob)
        let again = #expect(throws: KeyAuthError.self) { try SSHCertificateAuthority.generate(.rsa).write(to: path) }
        #expect(again?.code == .invalidArgument)
        #expect(again?.message.hasSuffix("to replace it, use keyauth-server ssh-ca rotate") == true)
        #expect(try SSHCertificateAuthority.load(file: path).publicKeyBlob == authority.publicKeyBlob)
        chmod(path, 0o640)
        let exposed = #expect(throws: KeyAuthError.self) { try SSHCertificateAuthority.load(file: path) }
        #expect(exposed?.code == .keyUnprotected)
        #expect(exposed?.message.contains("--ssh-ca-key-file") == true)
    }

    @Test("a device whose stored key has the ROCA fingerprint gets no certificate, even with a token")
    func noCertificateForARocaKey() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let caFile = environment.directory.path + "/ssh-ca.pem"
        try SSHCertificateAuthority.generate(.ed25519).write(to: caFile)
        let api = try environment.directAPI { $0.sshCAKeyFile = caFile }
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)
        // As a device registered before such keys were refused: its token is from before.
        let roca = try RSAPublicKey(modulus: ROCAShapedModulus.make(bits: 2048), exponent: [0x01, 0x00, 0x01])
        let storage = try #require(api.storage as? SQLStorage)
        try storage.database.write { connection throws(StorageError) in
            _ = try connection.execute(
                "UPDATE devices SET public_key_pem = $1 WHERE kid = $2",
                [.text(roca.pemRepresentation), .text(key.publicKey.fingerprint)])
        }
        let refused = try api.authorized("POST", "/v1/ssh/certificates", token: token)
        #expect(refused.status == 403 && refused.errorCode == "access_denied", "\(refused.text)")
        #expect(try storage.auditEvents(since: 0).filter { $0.action == .issueSSHCertificate }.isEmpty)
    }

    @Test("a device gets a certificate of its own registered key, audited; a revoked one gets none")
    func issuesForTheCallersKey() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let caFile = environment.directory.path + "/ssh-ca.pem"
        try SSHCertificateAuthority.generate(.ecdsa).write(to: caFile)
        let api = try environment.directAPI {
            $0.sshCAKeyFile = caFile
            $0.sshNoPortForwarding = true
        }
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)

        let issued = try api.authorized("POST", "/v1/ssh/certificates", token: token)
        #expect(issued.status == 201, "\(issued.text)")
        #expect(issued.headers["Cache-Control"] == "no-store")
        let line = try #require(issued.json?["certificate"]?.stringValue)
        #expect(issued.json?["principals"] == .array(["alice"]))
        let validAfter = try #require(issued.json?["valid_after"]?.integerValue)
        let validBefore = try #require(issued.json?["valid_before"]?.integerValue)
        #expect(validBefore - validAfter == 8 * 3600 + SSHCertificateIssuer.backdating)
        let described = try Self.describe(line, in: environment.directory)
        #expect(described.status == 0, "\(described.errorOutput)")
        // The certified key is the device's: its SHA-256 fingerprint is the one of the registered key.
        let publicKeyFile = environment.directory.path + "/device.pub"
        try
            (String(
                decoding: try SSHCertificateAuthority.publicKeyBlob(of: .rsa(key.publicKey)).base64Line, as: UTF8.self))
            .write(toFile: publicKeyFile, atomically: true, encoding: .utf8)
        let deviceFingerprint = try ExternalCommand.run(["ssh-keygen", "-l", "-f", publicKeyFile], timeout: 30)
        let hash = try #require(deviceFingerprint.output.split(separator: " ").dropFirst().first)
        #expect(described.output.contains("Public key: RSA-CERT \(hash)"), "\(described.output)")
        #expect(!described.output.contains("permit-port-forwarding"))
        #expect(described.output.contains("device-key@keyauth"))
        #expect(described.output.contains("device-tier@keyauth"), "\(described.output)")

        let audited = try api.storage.auditEvents(since: 0).filter { $0.action == .issueSSHCertificate }
        #expect(audited.count == 1)
        #expect(audited.first?.user == "alice")
        #expect(audited.first?.subject == key.publicKey.fingerprint)
        #expect(audited.first?.detail?.contains("principals alice") == true)

        let published = try api.send("GET", "/v1/ssh/ca")
        #expect(published.status == 200)
        #expect(published.text.hasPrefix("ecdsa-sha2-nistp256 "))

        #expect(try api.authorized("POST", "/v1/ssh/certificates", token: nil).status == 401)
        #expect(try api.authorized("DELETE", "/v1/devices/\(key.publicKey.fingerprint)", token: token).status == 204)
        let revoked = try api.authorized("POST", "/v1/ssh/certificates", token: token)
        #expect(revoked.status == 401)
        #expect(revoked.json?["certificate"] == nil)
    }

    @Test("each device gets at most 10 certificates a minute: then 429 slow_down, with no signature and no audit event")
    func certificatesPerDeviceAreLimited() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let caFile = environment.directory.path + "/ssh-ca.key"
        try SSHCertificateAuthority.generate(.ed25519).write(to: caFile)
        let api = try environment.directAPI { $0.sshCAKeyFile = caFile }
        let laptop = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        for _ in 0..<AttemptLimits.sshCertificatesPerWindow {
            #expect(try api.authorized("POST", "/v1/ssh/certificates", token: laptop).status == 201)
        }
        let refused = try api.authorized("POST", "/v1/ssh/certificates", token: laptop)
        #expect(refused.status == 429 && refused.errorCode == "slow_down", "\(refused.text)")
        #expect(refused.headers["Retry-After"] != nil)
        let audited = { try api.storage.auditEvents(since: 0).filter { $0.action == .issueSSHCertificate }.count }
        #expect(try audited() == AttemptLimits.sshCertificatesPerWindow)
        // The budget is the device's, not the address's.
        let desktop = try api.activeDevice(user: "bob", key: try ServerTestKeys.key("bob-1"))
        #expect(try api.authorized("POST", "/v1/ssh/certificates", token: desktop).status == 201)
        api.clock.advance(by: 61)
        #expect(try api.authorized("POST", "/v1/ssh/certificates", token: laptop).status == 201)
    }

    @Test("what a request body says (another key, another user, other principals) changes nothing in the certificate")
    func requestBodyIsIgnored() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let caFile = environment.directory.path + "/ssh-ca.key"
        try SSHCertificateAuthority.generate(.ed25519).write(to: caFile)
        let api = try environment.directAPI { $0.sshCAKeyFile = caFile }
        let alice = try ServerTestKeys.key("alice-1")
        let bob = try ServerTestKeys.key("bob-1")
        let aliceToken = try api.activeDevice(user: "alice", key: alice)
        _ = try api.activeDevice(user: "bob", key: bob)
        let bobsKey = String(
            decoding: try SSHCertificateAuthority.publicKeyBlob(of: .rsa(bob.publicKey)).base64Line, as: UTF8.self)
        var headers = HTTPHeaders()
        headers.add("Authorization", "Bearer \(aliceToken)")
        headers.add("Content-Type", "application/json")
        let body = JSONValue.object([
            "public_key": .string(bobsKey), "user": .string("bob"), "principals": .array(["root", "bob"]),
            "kid": .string(bob.publicKey.fingerprint),
        ])
        let issued = try api.send(
            "POST", "/v1/ssh/certificates", headers: headers, body: Array(body.serialized().utf8))
        #expect(issued.status == 201, "\(issued.text)")
        #expect(issued.json?["principals"] == .array(["alice"]))
        let line = try #require(issued.json?["certificate"]?.stringValue)
        let described = try Self.describe(line, in: environment.directory)
        #expect(
            described.output.contains("keyauth user alice device \(alice.publicKey.fingerprint)"), "\(described.output)"
        )
        let lines = described.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let principals = lines.drop { $0 != "Principals:" }.dropFirst().prefix { !$0.hasPrefix("Critical Options:") }
        #expect(Array(principals) == ["alice"], "\(described.output)")
    }

    @Test("a server without --ssh-ca-key-file answers 404 and says why")
    func noCertificateAuthority() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let api = try environment.directAPI()
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let refused = try api.authorized("POST", "/v1/ssh/certificates", token: token)
        #expect(refused.status == 404)
        #expect(refused.json?["error_description"]?.stringValue?.contains("--ssh-ca-key-file") == true)
        #expect(try api.send("GET", "/v1/ssh/ca").status == 404)
    }

    @Test("ssh-ca init and show: a key file, its line, no second init, and usage errors")
    func command() throws {
        let directory = TemporaryDirectory("keyauth-ssh-ca")
        defer { directory.remove() }
        let path = directory.path + "/ca.pem"
        let created = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "init", "--alg", "rsa", "--ssh-ca-key-file", path], timeout: 60)
        #expect(created.status == 0, "\(created.errorOutput)")
        #expect(created.output.hasPrefix("ssh-rsa "))
        let shown = try ExternalCommand.run([Binaries.server, "ssh-ca", "show", "--ssh-ca-key-file", path])
        #expect(shown.status == 0)
        #expect(shown.output == created.output)
        let again = try ExternalCommand.run([Binaries.server, "ssh-ca", "init", "--ssh-ca-key-file", path])
        #expect(again.status == 1)
        #expect(again.errorOutput.contains("exists"))
        for arguments in [
            ["ssh-ca", "init"], ["ssh-ca", "init", "--alg", "dsa", "--ssh-ca-key-file", path],
            ["ssh-ca", "shwo", "--ssh-ca-key-file", path],
        ] {
            let refused = try ExternalCommand.run([Binaries.server] + arguments)
            #expect(refused.status == 64, "\(arguments): \(refused.errorOutput)")
        }
        // krl: the list of a database's revoked devices, which ssh-keygen reads.
        let database = directory.path + "/ka.db"
        let storage = try StorageFactory.open(database)
        _ = try storage.insertDevice(
            DeviceRecord(
                kid: "kid-revoked", user: "alice", name: "old", publicKeyPEM: "", status: .revoked, createdAt: 1))
        storage.close()
        let krl = directory.path + "/revoked.krl"
        let listed = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "krl", krl, "--ssh-ca-key-file", path, "--db", database])
        #expect(listed.status == 0, "\(listed.errorOutput)")
        #expect(listed.errorOutput.contains("revoking the certificates of 1 revoked device(s)"))
        let authority = try SSHCertificateAuthority.load(file: path)
        let certificate = directory.path + "/revoked-cert.pub"
        var fields = try Self.certificate()
        fields.keyID = "keyauth user alice device kid-revoked"
        try (try fields.line(signedBy: authority, nonce: [1, 2, 3], comment: "c") + "\n").write(
            toFile: certificate, atomically: true, encoding: .utf8)
        let queried = try ExternalCommand.run(["ssh-keygen", "-Q", "-f", krl, certificate])
        #expect(queried.output.contains("REVOKED"), "\(queried.output)\(queried.errorOutput)")
        fields.keyID = "keyauth user alice device kid-active"
        try (try fields.line(signedBy: authority, nonce: [1, 2, 3], comment: "c") + "\n").write(
            toFile: certificate, atomically: true, encoding: .utf8)
        let kept = try ExternalCommand.run(["ssh-keygen", "-Q", "-f", krl, certificate])
        #expect(kept.status == 0)
        #expect(kept.output.contains("ok"), "\(kept.output)\(kept.errorOutput)")

        let missing = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "show", "--ssh-ca-key-file", directory.path + "/none.pem"])
        #expect(missing.status == 66)
        #expect(
            missing.errorOutput
                == "keyauth-server: --ssh-ca-key-file: \(directory.path)/none.pem does not exist; `keyauth-server "
                + "ssh-ca init --ssh-ca-key-file PATH` makes one, or give the path the server uses\n")
    }
}

extension Array where Element == UInt8 {
    /// An OpenSSH public key line of this key blob.
    fileprivate var base64Line: [UInt8] {
        Array(("ssh-rsa " + SSHText.base64(self) + " device\n").utf8)
    }
}
