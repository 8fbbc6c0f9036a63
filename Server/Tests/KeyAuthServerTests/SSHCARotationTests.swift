import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `ssh-ca rotate` and `retire`: a new CA signs, the old one stays published (CA lines and
/// revocation list) for the overlap or until retired, and running servers follow at cleanup.
@Suite("SSH CA rotation", .timeLimit(.minutes(10)))
struct SSHCARotationTests {
    static func run(_ arguments: [String]) throws -> ExternalCommand {
        try ExternalCommand.run([Binaries.server, "ssh-ca"] + arguments, timeout: 60)
    }

    @Test("rotate prints the new line and the old one, refuses a second rotation, and retire drops the old one")
    func command() throws {
        let directory = TemporaryDirectory("keyauth-ssh-rotate")
        defer { directory.remove() }
        let keyFile = directory.path + "/ca.pem"
        let created = try Self.run(["init", "--ssh-ca-key-file", keyFile])
        #expect(created.status == 0, "\(created.errorOutput)")
        let oldLine = created.output.replacingOccurrences(of: "\n", with: "")

        let rotated = try Self.run(["rotate", "--alg", "ecdsa", "--ssh-ca-key-file", keyFile])
        #expect(rotated.status == 0, "\(rotated.errorOutput)")
        let lines = rotated.output.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(lines.first?.hasPrefix("ecdsa-sha2-nistp256 ") == true)
        #expect(lines.first?.hasSuffix(" keyauth-ca") == true)
        #expect(lines.last == oldLine.replacingOccurrences(of: " keyauth-ca", with: " keyauth-ca-previous"))
        #expect(rotated.errorOutput.contains("ssh-ca retire"))
        #expect(rotated.errorOutput.contains("trust both lines below"), "\(rotated.errorOutput)")
        // The default overlap outlasts every certificate the old CA signed: no warning.
        #expect(!rotated.errorOutput.contains("warning"), "\(rotated.errorOutput)")
        #expect(fileMode(keyFile + ".previous").map { $0 & 0o777 } == 0o600)
        #expect(try Self.run(["show", "--ssh-ca-key-file", keyFile]).output == rotated.output)

        // ssh-keygen reads both lines as keys.
        try rotated.output.write(toFile: directory.path + "/cas.pub", atomically: true, encoding: .utf8)
        let fingerprints = try ExternalCommand.run(["ssh-keygen", "-l", "-f", directory.path + "/cas.pub"])
        #expect(fingerprints.status == 0, "\(fingerprints.errorOutput)")
        #expect(fingerprints.output.split(separator: "\n").count == 2)

        let again = try Self.run(["rotate", "--ssh-ca-key-file", keyFile])
        #expect(again.status == 1)
        #expect(again.errorOutput.contains("run ssh-ca retire first"), "\(again.errorOutput)")
        #expect(try Self.run(["show", "--ssh-ca-key-file", keyFile]).output == rotated.output)

        let retired = try Self.run(["retire", "--ssh-ca-key-file", keyFile])
        #expect(retired.status == 0, "\(retired.errorOutput)")
        #expect(retired.errorOutput.contains("retired the previous SSH CA"))
        #expect(!SecureFile.exists(keyFile + ".previous"))
        #expect(try Self.run(["show", "--ssh-ca-key-file", keyFile]).output == (lines.first ?? "") + "\n")
        let nothing = try Self.run(["retire", "--ssh-ca-key-file", keyFile])
        #expect(nothing.status == 0)
        #expect(nothing.errorOutput.contains("no previous SSH CA"))

        // With no overlap the old CA is not published at all, and a rotation may follow at once.
        let immediate = try Self.run(["rotate", "--overlap", "0s", "--ssh-ca-key-file", keyFile])
        #expect(immediate.status == 0, "\(immediate.errorOutput)")
        #expect(immediate.output.split(separator: "\n").count == 1)
        #expect(immediate.output.hasPrefix("ecdsa-sha2-nistp256 "))
        // One line printed, and said so; the old CA's live certificates get a loud warning.
        #expect(!immediate.errorOutput.contains("both lines"), "\(immediate.errorOutput)")
        #expect(immediate.errorOutput.contains("trust only the line below"), "\(immediate.errorOutput)")
        #expect(
            immediate.errorOutput.contains(
                "warning: --overlap 0s is shorter than the certificate lifetime (8h, --ssh-certificate-lifetime)"),
            "\(immediate.errorOutput)")
        #expect(try Self.run(["retire", "--ssh-ca-key-file", keyFile]).status == 0)
        // The lifetime is the servers': from the flag, or the settings file serve reads.
        let short = try Self.run(
            ["rotate", "--overlap", "2h", "--ssh-certificate-lifetime", "1h", "--ssh-ca-key-file", keyFile])
        #expect(short.status == 0, "\(short.errorOutput)")
        #expect(!short.errorOutput.contains("warning"), "\(short.errorOutput)")
        #expect(try Self.run(["retire", "--ssh-ca-key-file", keyFile]).status == 0)
        try "ssh-certificate-lifetime = 3h\n".write(
            toFile: directory.path + "/server.conf", atomically: true, encoding: .utf8)
        let configured = try Self.run(
            ["rotate", "--overlap", "2h", "--config", directory.path + "/server.conf", "--ssh-ca-key-file", keyFile])
        #expect(configured.status == 0, "\(configured.errorOutput)")
        #expect(configured.errorOutput.contains("lifetime (3h, "), "\(configured.errorOutput)")
        #expect(try Self.run(["retire", "--ssh-ca-key-file", keyFile]).status == 0)
        #expect(try Self.run(["rotate", "--ssh-ca-key-file", keyFile]).status == 0)

        for arguments in [
            ["rotate", "--overlap", "31d", "--ssh-ca-key-file", keyFile],
            ["show", "--overlap", "1d", "--ssh-ca-key-file", keyFile],
            ["show", "--ssh-certificate-lifetime", "1h", "--ssh-ca-key-file", keyFile],
            ["rotate", "--ssh-certificate-lifetime", "8d", "--ssh-ca-key-file", keyFile],
            ["retire", "--alg", "rsa", "--ssh-ca-key-file", keyFile], ["rotate"],
        ] {
            let refused = try Self.run(arguments)
            #expect(refused.status == 64, "\(arguments): \(refused.errorOutput)")
        }
    }

    @Test("a previous CA file that others may write, or that is not one, is refused")
    func previousFileIsGuarded() throws {
        let directory = TemporaryDirectory("keyauth-ssh-rotate")
        defer { directory.remove() }
        let keyFile = directory.path + "/ca.pem"
        let authority = try SSHCertificateAuthority.generate(.ed25519)
        try authority.write(to: keyFile)
        _ = try SSHCertificateAuthorities.rotate(keyFile: keyFile, to: nil, overlap: 60, now: 1_800_000_000)
        let previous = try #require(try SSHPreviousAuthority.load(besides: keyFile))
        #expect(previous.publicKeyBlob == authority.publicKeyBlob)
        #expect(previous.publishedUntil == 1_800_000_060)
        chmod(keyFile + ".previous", 0o660)
        let exposed = #expect(throws: KeyAuthError.self) { try SSHPreviousAuthority.load(besides: keyFile) }
        #expect(exposed?.code == .keyUnprotected)
        for text in [
            "{}", "not json", #"{"public_key": "ssh-dss AAAA", "rotated_at": 1, "published_until": 2}"#,
            #"{"public_key": "ssh-rsa \#(SSHText.base64(authority.publicKeyBlob))", "rotated_at": 1, "published_until": 2}"#,
            #"{"public_key": "ssh-ed25519 \#(SSHText.base64(authority.publicKeyBlob))", "rotated_at": 3, "published_until": 2}"#,
        ] {
            #expect(SSHPreviousAuthority.decode(Array(text.utf8)) == nil, "\(text)")
        }
        let good =
            #"{"public_key": "ssh-ed25519 \#(SSHText.base64(authority.publicKeyBlob))", "rotated_at": 1, "published_until": 2}"#
        #expect(SSHPreviousAuthority.decode(Array(good.utf8))?.publicKeyBlob == authority.publicKeyBlob)
    }

    @Test("a running server signs with the new CA after its cleanup, publishes both, and revokes under both")
    func runningServerFollows() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let (responder, api, old, keyFile) = try SSHRevocationListTests.certificateAuthority(environment)
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)
        let oldLine = old.publicKeyLine(comment: "keyauth-ca") + "\n"
        #expect(try api.send("GET", "/v1/ssh/ca").text == oldLine)
        let oldCertificate = try #require(
            try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["certificate"]?.stringValue)

        let rotated = try SSHCertificateAuthorities.rotate(
            keyFile: keyFile, to: .rsa, overlap: 3600, now: environment.clock.now)
        // Until its cleanup, the server still signs with the old key.
        #expect(try api.send("GET", "/v1/ssh/ca").text == oldLine)
        responder.purgeExpired()
        let published = try api.send("GET", "/v1/ssh/ca").text
        #expect(
            published == rotated.signing.publicKeyLine(comment: "keyauth-ca") + "\n"
                + old.publicKeyLine(comment: "keyauth-ca-previous") + "\n")
        let newCertificate = try #require(
            try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["certificate"]?.stringValue)
        let described = try SSHCertificateTests.describe(newCertificate, in: environment.directory)
        #expect(described.output.contains("Signing CA: RSA "), "\(described.output)")

        // Once the device is revoked, the list revokes its certificates of either CA.
        #expect(try api.authorized("DELETE", "/v1/devices/\(key.publicKey.fingerprint)", token: token).status == 204)
        let listFile = environment.directory.path + "/revoked.krl"
        try Data(try api.send("GET", "/v1/ssh/krl").body).write(to: URL(fileURLWithPath: listFile))
        for (name, line) in [("old", oldCertificate), ("new", newCertificate)] {
            let certificateFile = environment.directory.path + "/\(name)-cert.pub"
            try (line + "\n").write(toFile: certificateFile, atomically: true, encoding: .utf8)
            let queried = try ExternalCommand.run(["ssh-keygen", "-Q", "-f", listFile, certificateFile])
            #expect(queried.output.contains("REVOKED"), "\(name): \(queried.output)\(queried.errorOutput)")
        }

        // After the overlap the old CA is no longer published, even before anyone retires it.
        environment.clock.advance(by: 3600)
        #expect(try api.send("GET", "/v1/ssh/ca").text == rotated.signing.publicKeyLine(comment: "keyauth-ca") + "\n")
    }
}
