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
        #expect(retired.errorOutput.contains("revoke it in the revocation list"), "\(retired.errorOutput)")
        #expect(!SecureFile.exists(keyFile + ".previous"))
        // The retired CA is kept, 0600, for the revocation list.
        #expect(fileMode(keyFile + ".retired").map { $0 & 0o777 } == 0o600)
        let oldBlob = try #require(
            SSHPreviousAuthority.publicKeyBlob(ofLine: String(oldLine.dropLast(" keyauth-ca".count))))
        #expect(try SSHRetiredAuthorities.load(besides: keyFile).publicKeyBlobs == [oldBlob])
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
                "warning: --overlap 0s is shorter than the certificate lifetime (8h, --ssh-certificate-lifetime) "
                    + "plus the cleanup interval (1m, --cleanup-interval)"),
            "\(immediate.errorOutput)")
        #expect(try Self.run(["retire", "--ssh-ca-key-file", keyFile]).status == 0)
        #expect(try SSHRetiredAuthorities.load(besides: keyFile).publicKeyBlobs.count == 2)
        // Servers sign with the old CA until their next cleanup: an overlap of exactly the
        // lifetime is too short by that interval.
        let exact = try Self.run(
            [
                "rotate", "--overlap", "1h", "--ssh-certificate-lifetime", "1h", "--cleanup-interval", "5m",
                "--ssh-ca-key-file", keyFile,
            ])
        #expect(exact.status == 0, "\(exact.errorOutput)")
        #expect(exact.errorOutput.contains("plus the cleanup interval (5m, "), "\(exact.errorOutput)")
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
            ["rotate", "--cleanup-interval", "2h", "--ssh-ca-key-file", keyFile],
            ["show", "--cleanup-interval", "1m", "--ssh-ca-key-file", keyFile],
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

        // The retired CAs' file: guarded the same way, and each entry a CA key, once.
        let line = "ssh-ed25519 \(SSHText.base64(authority.publicKeyBlob))"
        let entry = #"{"public_key": "\#(line)", "retired_at": 5}"#
        for text in [
            "{}", #"{"retired": {}}"#, #"{"retired": [{"public_key": "\#(line)"}]}"#,
            #"{"retired": [\#(entry), \#(entry)]}"#, #"{"retired": [{"public_key": "ssh-dss AAAA", "retired_at": 5}]}"#,
        ] {
            #expect(SSHRetiredAuthorities.decode(Array(text.utf8)) == nil, "\(text)")
        }
        #expect(
            SSHRetiredAuthorities.decode(Array(#"{"retired": [\#(entry)]}"#.utf8))?.authorities.first?.retiredAt == 5)
        chmod(keyFile + ".previous", 0o600)
        #expect(try SSHCertificateAuthorities.retire(keyFile: keyFile, now: 1_800_000_100) != .nothingToRetire)
        let retired = try SSHRetiredAuthorities.load(besides: keyFile)
        #expect(retired.authorities == [.init(publicKeyBlob: authority.publicKeyBlob, retiredAt: 1_800_000_100)])
        #expect(SSHRetiredAuthorities.decode(retired.encoded()) == retired)
        chmod(keyFile + ".retired", 0o644)
        let exposedList = #expect(throws: KeyAuthError.self) { try SSHRetiredAuthorities.load(besides: keyFile) }
        #expect(exposedList?.code == .keyUnprotected)
        // Nor does a server start with it.
        #expect(throws: KeyAuthError.self) { try SSHCertificateAuthorities(keyFile: keyFile) }
    }

    @Test("a key file put back from before its CA was retired is refused; rotating away from it publishes it no more")
    func restoredRetiredKey() throws {
        let directory = TemporaryDirectory("keyauth-ssh-rotate")
        defer { directory.remove() }
        let keyFile = directory.path + "/ca.pem"
        let original = try SSHCertificateAuthority.generate(.ed25519)
        try original.write(to: keyFile)
        let backup = try SecureFile.readProtected(keyFile)
        let rotated = try SSHCertificateAuthorities.rotate(keyFile: keyFile, to: nil, overlap: 60, now: 1_800_000_000)
        #expect(
            try SSHCertificateAuthorities.retire(keyFile: keyFile, now: 1_800_000_010) == .retired(rotated.previous))
        let running = try SSHCertificateAuthorities(keyFile: keyFile)

        try SecureFile.write(backup, to: keyFile)
        let refused = #expect(throws: KeyAuthError.self) { try SSHCertificateAuthorities(keyFile: keyFile) }
        #expect(refused?.code == .keyCorrupt)
        #expect(
            refused?.message.contains("put back the key that replaced it; if that key is lost, ssh-ca rotate") == true,
            "\(refused?.message ?? "")")
        let shown = try Self.run(["show", "--ssh-ca-key-file", keyFile])
        #expect(shown.status == 65)
        #expect(shown.errorOutput.contains("which the revocation list revokes"), "\(shown.errorOutput)")
        // A running server keeps signing with the keys it read.
        #expect(throws: KeyAuthError.self) { try running.reload() }
        #expect(running.current.signing.publicKeyBlob == rotated.signing.publicKeyBlob)

        // Rotating away from the retired CA does not publish it again; it stays revoked.
        let again = try SSHCertificateAuthorities.rotate(keyFile: keyFile, to: nil, overlap: 3600, now: 1_800_000_020)
        #expect(again.previous.publishedUntil == 1_800_000_020, "not published, whatever the overlap")
        let keys = try SSHCertificateAuthorities(keyFile: keyFile).current
        #expect(keys.published(at: 1_800_000_021) == [again.signing.publicKeyBlob])
        #expect(keys.revoked(at: 1_800_000_021) == [original.publicKeyBlob])

        // A rotation that stopped before replacing the key leaves the signing CA as the previous
        // one: retire removes the file and never revokes the CA that signs.
        try SSHPreviousAuthority(replacing: again.signing, rotatedAt: 1_800_000_030, publishedUntil: 1_800_009_999)
            .write(to: SSHPreviousAuthority.path(besides: keyFile))
        let leftover = try Self.run(["retire", "--ssh-ca-key-file", keyFile])
        #expect(leftover.status == 0, "\(leftover.errorOutput)")
        #expect(leftover.errorOutput.contains("naming the CA that still signs; nothing was retired"))
        #expect(!SecureFile.exists(SSHPreviousAuthority.path(besides: keyFile)))
        #expect(try !SSHRetiredAuthorities.load(besides: keyFile).publicKeyBlobs.contains(again.signing.publicKeyBlob))
        #expect(
            try SSHCertificateAuthorities(keyFile: keyFile).current.signing.publicKeyBlob == again.signing.publicKeyBlob
        )
    }

    @Test("a CA no longer published is revoked in the list: after its overlap, retired, or replaced")
    func unpublishedAuthoritiesAreRevoked() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let (responder, api, _, keyFile) = try SSHRevocationListTests.certificateAuthority(environment)
        let key = try ServerTestKeys.key("alice-1")
        _ = try api.activeDevice(user: "alice", key: key)
        /// A certificate from the CA that signs now, with a token of now (the clock moves by hours).
        func certificate() throws -> String {
            let token = try api.accessToken(key)
            return try #require(
                try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["certificate"]?.stringValue)
        }
        /// Whether the list the server serves now revokes `line`, as `ssh-keygen -Q` (sshd's check) reads it.
        func isRevoked(_ line: String) throws -> Bool {
            let listFile = environment.directory.path + "/revoked.krl"
            let certificateFile = environment.directory.path + "/queried-cert.pub"
            try Data(try api.send("GET", "/v1/ssh/krl").body).write(to: URL(fileURLWithPath: listFile))
            try (line + "\n").write(toFile: certificateFile, atomically: true, encoding: .utf8)
            let queried = try ExternalCommand.run(["ssh-keygen", "-Q", "-f", listFile, certificateFile])
            try #require(queried.status == 0 || queried.output.contains("REVOKED"), "\(queried.errorOutput)")
            return queried.output.contains("REVOKED")
        }
        let first = try certificate()
        #expect(try !isRevoked(first))

        let rotated = try SSHCertificateAuthorities.rotate(
            keyFile: keyFile, to: nil, overlap: 3600, now: environment.clock.now)
        responder.purgeExpired()
        // During the overlap hosts still trust the old CA: its certificates stand.
        #expect(try !isRevoked(first))
        let second = try certificate()
        environment.clock.advance(by: 3600)
        responder.purgeExpired()
        #expect(try isRevoked(first))
        #expect(try !isRevoked(second))

        // Retired, it stays revoked; a rotation that replaces an unpublished previous CA retires it.
        #expect(try SSHCertificateAuthorities.retire(keyFile: keyFile, now: environment.clock.now) != .nothingToRetire)
        for _ in 0..<2 {
            _ = try SSHCertificateAuthorities.rotate(keyFile: keyFile, to: nil, overlap: 0, now: environment.clock.now)
        }
        responder.purgeExpired()
        let retired = try SSHRetiredAuthorities.load(besides: keyFile).publicKeyBlobs
        #expect(retired.count == 2)
        #expect(retired.last == rotated.signing.publicKeyBlob)
        let third = try certificate()
        #expect(try isRevoked(first))
        #expect(try isRevoked(second))
        #expect(try !isRevoked(third))
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
