import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

#if canImport(Glibc)
    import Glibc
#endif

/// A principal taken out of `--ssh-principals-file` closes the hosts it opened at once, not when
/// the certificates naming it expire: the revocation list names those certificates by serial.
@Suite("SSH certificates of principals no longer granted", .timeLimit(.minutes(5)))
struct SSHPrincipalRevocationTests {
    /// A responder that is an SSH CA with the principals file `rules`, a test API on it, the
    /// principals file's path and the CA key file's.
    static func authority(
        _ environment: TestEnvironment, rules: String
    ) throws -> (KeyAuthResponder, TestAPI, principalsFile: String, keyFile: String) {
        let keyFile = environment.directory.path + "/ssh-ca.pem"
        try SSHCertificateAuthority.generate(.ed25519).write(to: keyFile)
        let principalsFile = environment.directory.path + "/principals"
        try write(rules, to: principalsFile)
        let (responder, storage) = try environment.makeResponder {
            $0.sshCAKeyFile = keyFile
            $0.sshPrincipalsFile = principalsFile
        }
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer,
            clock: environment.clock, storage: storage)
        return (responder, api, principalsFile, keyFile)
    }

    static func write(_ rules: String, to path: String) throws {
        try rules.write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
    }

    /// A certificate issued to the device of `token`: its line, written to a file of its own,
    /// its serial and its principals.
    static func certificate(
        _ api: TestAPI, token: String, in directory: TemporaryDirectory
    ) throws -> (file: String, serial: UInt64, principals: [String]) {
        let answer = try api.authorized("POST", "/v1/ssh/certificates", token: token)
        try #require(answer.status == 201, "\(answer.status) \(String(decoding: answer.body, as: UTF8.self))")
        let line = try #require(answer.json?["certificate"]?.stringValue)
        let serial = try #require(answer.json?["serial"]?.stringValue.flatMap { UInt64($0) })
        let principals = answer.json?["principals"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let file = directory.path + "/\(serial)-cert.pub"
        try (line + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        return (file, serial, principals)
    }

    /// Whether OpenSSH reads the list `krl` as revoking the certificate in `file` (`ssh-keygen
    /// -Q`); it must read the list either way.
    static func isRevoked(_ file: String, by krl: [UInt8], in directory: TemporaryDirectory) throws -> Bool {
        let listPath = directory.path + "/\(UUID().uuidString).krl"
        try Data(krl).write(to: URL(fileURLWithPath: listPath))
        let queried = try ExternalCommand.run(["ssh-keygen", "-Q", "-f", listPath, file], timeout: 30)
        #expect(queried.output.contains(": ok") || queried.output.contains("REVOKED"), "\(queried.errorOutput)")
        return queried.output.contains("REVOKED")
    }

    @Test(
        "a certificate naming a principal taken out of the file is in the next list by serial; the user's new one is not"
    )
    func removedPrincipalRevokesItsCertificates() throws {
        let environment = TestEnvironment()
        let directory = environment.directory
        let (responder, api, principalsFile, _) = try Self.authority(
            environment, rules: "user alice: deploy backup\nuser bob: backup\n")
        let alice = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let bob = try api.activeDevice(user: "bob", key: try ServerTestKeys.key("bob-1"))
        let before = try Self.certificate(api, token: alice, in: directory)
        #expect(before.principals == ["alice", "deploy", "backup"])
        let bobs = try Self.certificate(api, token: bob, in: directory)
        #expect(bobs.principals == ["bob", "backup"])
        let first = try api.send("GET", "/v1/ssh/krl").body
        #expect(try !Self.isRevoked(before.file, by: first, in: directory))
        let builds = responder.sshCertificates?.revocationLists.builds

        // The same rules read again change nothing, and the list is not built again.
        responder.purgeExpired()
        #expect(try api.send("GET", "/v1/ssh/krl").body == first)
        #expect(responder.sshCertificates?.revocationLists.builds == builds)

        // deploy goes: the certificate naming it is revoked in the very next fetch, well within
        // the list's minute; bob's, whose principals are all still granted, is not.
        try Self.write("user alice: backup\nuser bob: backup\n", to: principalsFile)
        responder.purgeExpired()
        let edited = try api.send("GET", "/v1/ssh/krl").body
        #expect(try Self.isRevoked(before.file, by: edited, in: directory))
        #expect(try !Self.isRevoked(bobs.file, by: edited, in: directory))

        // Alice's next certificate names what she has now, and the list leaves it alone; so does
        // a rule that grants more.
        let after = try Self.certificate(api, token: alice, in: directory)
        #expect(after.principals == ["alice", "backup"])
        try Self.write("user alice: backup root\nuser bob: backup\n", to: principalsFile)
        responder.purgeExpired()
        let widened = try api.send("GET", "/v1/ssh/krl").body
        #expect(try !Self.isRevoked(after.file, by: widened, in: directory))
        #expect(try Self.isRevoked(before.file, by: widened, in: directory))

        // A principals file that cannot be read leaves the rules as they were: nothing changes.
        try Self.write("user alice backup\n", to: principalsFile)
        responder.purgeExpired()
        #expect(try api.send("GET", "/v1/ssh/krl").body == widened)

        // The record goes once the certificate cannot be valid even at a host whose clock is
        // behind by the backdating; the list stops naming it then.
        let expiry = try #require(try api.storage.sshCertificates(validAfter: 0).first { $0.serial == before.serial })
        environment.clock.advance(
            by: expiry.validBefore + SSHCertificateIssuer.backdating - 1 - environment.clock.closure())
        responder.purgeExpired()
        #expect(try api.storage.sshCertificates(validAfter: 0).contains { $0.serial == before.serial })
        environment.clock.advance(by: 1)
        responder.purgeExpired()
        #expect(try !api.storage.sshCertificates(validAfter: 0).contains { $0.serial == before.serial })
        environment.clock.advance(by: SSHRevocationListCache.maximumAge)
        #expect(try !Self.isRevoked(before.file, by: try api.send("GET", "/v1/ssh/krl").body, in: directory))
    }

    @Test("ssh-ca krl with the principals file lists the certificates of principals it no longer grants; without, none")
    func adminListJudgesWithTheFileGiven() throws {
        // On the real clock, which the command reads: its certificates must not have expired.
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let directory = environment.directory
        let (_, api, principalsFile, keyFile) = try Self.authority(environment, rules: "user alice: deploy\n")
        let alice = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let issued = try Self.certificate(api, token: alice, in: directory)
        try Self.write("user bob: deploy\n", to: principalsFile)
        let database = environment.databasePath
        // The admin commands refuse a database others may read, as a deployment's is not.
        chmod(database, 0o600)
        let krl = directory.path + "/admin.krl"

        let judged = try ExternalCommand.run(
            [
                Binaries.server, "ssh-ca", "krl", krl, "--ssh-ca-key-file", keyFile, "--ssh-principals-file",
                principalsFile, "--db", database,
            ], timeout: 60)
        #expect(judged.status == 0, "\(judged.errorOutput)")
        #expect(
            judged.errorOutput.contains("1 certificate(s) of principals no longer granted"), "\(judged.errorOutput)")
        #expect(
            try Self.isRevoked(issued.file, by: Array(try Data(contentsOf: URL(fileURLWithPath: krl))), in: directory))

        let unjudged = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "krl", krl, "--ssh-ca-key-file", keyFile, "--db", database], timeout: 60)
        #expect(unjudged.status == 0, "\(unjudged.errorOutput)")
        #expect(!unjudged.errorOutput.contains("principals"), "\(unjudged.errorOutput)")
        #expect(
            try !Self.isRevoked(issued.file, by: Array(try Data(contentsOf: URL(fileURLWithPath: krl))), in: directory))

        // Only krl reads the principals file; a missing one is named.
        let shown = try ExternalCommand.run(
            [Binaries.server, "ssh-ca", "show", "--ssh-ca-key-file", keyFile, "--ssh-principals-file", principalsFile])
        #expect(shown.status == 64)
        #expect(shown.errorOutput.contains("only krl takes it"), "\(shown.errorOutput)")
        let missing = try ExternalCommand.run(
            [
                Binaries.server, "ssh-ca", "krl", krl, "--ssh-ca-key-file", keyFile, "--ssh-principals-file",
                directory.path + "/none", "--db", database,
            ], timeout: 60)
        #expect(missing.status == 66, "\(missing.errorOutput)")
        #expect(missing.errorOutput.contains("--ssh-principals-file"), "\(missing.errorOutput)")
        try Self.write("user alice deploy\n", to: principalsFile)
        let broken = try ExternalCommand.run(
            [
                Binaries.server, "ssh-ca", "krl", krl, "--ssh-ca-key-file", keyFile, "--ssh-principals-file",
                principalsFile, "--db", database,
            ], timeout: 60)
        #expect(broken.status == 65, "\(broken.errorOutput)")
        #expect(broken.errorOutput.contains("line 1"), "\(broken.errorOutput)")
        let empty = try ExternalCommand.run(
            [
                Binaries.server, "ssh-ca", "krl", krl, "--ssh-ca-key-file", keyFile, "--ssh-principals-file", "",
                "--db", database,
            ], timeout: 60)
        #expect(empty.status == 64, "\(empty.errorOutput)")
        #expect(empty.errorOutput.contains("empty path"), "\(empty.errorOutput)")
    }

    @Test("a forced rebuild makes the next fetch build the list again, once")
    func forcedRebuild() throws {
        let cache = SSHRevocationListCache(signal: RevocationSignal(), now: { 1_800_000_000 })
        var reads = 0
        func fetch() throws -> SSHRevocationListCache.Snapshot {
            try cache.list(authorities: [[1, 2, 3]]) {
                reads += 1
                return SSHRevocations(keyIDs: [], keyFingerprints: [], serials: reads > 1 ? [42] : [])
            }
        }
        let first = try fetch()
        #expect(try fetch() == first)
        #expect(cache.builds == 1)
        cache.rebuildAtNextFetch()
        let rebuilt = try fetch()
        #expect(cache.builds == 2)
        #expect(rebuilt != first)
        #expect(try fetch() == rebuilt)
        #expect(cache.builds == 2)
    }
}
