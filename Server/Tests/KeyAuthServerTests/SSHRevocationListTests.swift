import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// `GET /v1/ssh/krl` under load: the list is built from the device records at most once a
/// minute, at once after a revocation, answered 304 to a host that has it, and an address that
/// fetches without pause is slowed down.
@Suite("SSH revocation list endpoint", .timeLimit(.minutes(10)))
struct SSHRevocationListTests {
    /// A responder that is an SSH CA with a new Ed25519 key file, a test API on it, the CA and
    /// its key file.
    static func certificateAuthority(
        _ environment: TestEnvironment
    ) throws -> (KeyAuthResponder, TestAPI, SSHCertificateAuthority, keyFile: String) {
        let keyFile = environment.directory.path + "/ssh-ca.pem"
        let authority = try SSHCertificateAuthority.generate(.ed25519)
        try authority.write(to: keyFile)
        let (responder, storage) = try environment.makeResponder { $0.sshCAKeyFile = keyFile }
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer,
            clock: environment.clock, storage: storage)
        return (responder, api, authority, keyFile)
    }

    static func builds(_ responder: KeyAuthResponder) -> Int {
        responder.sshCertificates?.revocationLists.builds ?? -1
    }

    @Test("many fetches build the list once; a revocation here is in the very next fetch; time rebuilds it")
    func cachedUntilRevocationOrAge() throws {
        let environment = TestEnvironment()
        let (responder, api, _, _) = try Self.certificateAuthority(environment)
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)
        let keyID = Array("keyauth user alice device \(key.publicKey.fingerprint)".utf8)

        let first = try api.send("GET", "/v1/ssh/krl")
        #expect(first.status == 200)
        let tag = try #require(first.headers["ETag"])
        for _ in 0..<50 {
            let again = try api.send("GET", "/v1/ssh/krl")
            #expect(again.body == first.body)
        }
        #expect(Self.builds(responder) == 1)
        #expect(!first.body.contains(keyID))

        // A host that has the list gets 304, with the same tag, and no body.
        let unchanged = try api.send("GET", "/v1/ssh/krl", headers: ["If-None-Match": "\"other\", W/\(tag)"])
        #expect(unchanged.status == 304)
        #expect(unchanged.body.isEmpty)
        #expect(unchanged.headers["ETag"] == tag)

        // After a minute the list is read again, but the same devices give the same list and tag.
        environment.clock.advance(by: SSHRevocationListCache.maximumAge)
        let aged = try api.send("GET", "/v1/ssh/krl", headers: ["If-None-Match": tag])
        #expect(aged.status == 304)
        #expect(Self.builds(responder) == 2)

        // A revocation through this server is in the next fetch, well before the minute is over.
        #expect(try api.authorized("DELETE", "/v1/devices/\(key.publicKey.fingerprint)", token: token).status == 204)
        let revoked = try api.send("GET", "/v1/ssh/krl", headers: ["If-None-Match": tag])
        #expect(revoked.status == 200)
        #expect(revoked.body.contains(keyID))
        #expect(revoked.headers["ETag"] != tag)
        #expect(Self.builds(responder) == 3)
    }

    @Test("a revocation by another process shows once the list is a minute old")
    func revocationElsewhereWithinTheBound() throws {
        let environment = TestEnvironment()
        let (responder, api, _, _) = try Self.certificateAuthority(environment)
        let key = try ServerTestKeys.key("alice-1")
        _ = try api.activeDevice(user: "alice", key: key)
        let keyID = Array("keyauth user alice device \(key.publicKey.fingerprint)".utf8)
        #expect(try !api.send("GET", "/v1/ssh/krl").body.contains(keyID))

        // The admin command's registry has its own signal: this server learns only from its clock.
        let other = DeviceRegistry(
            storage: api.storage, pendingLifetime: 600, deviceRetention: 86_400, now: environment.clock.closure)
        _ = try other.revoke(kid: key.publicKey.fingerprint, ownedBy: nil, by: .administrator)
        environment.clock.advance(by: SSHRevocationListCache.maximumAge - 1)
        #expect(try !api.send("GET", "/v1/ssh/krl").body.contains(keyID))
        environment.clock.advance(by: 1)
        #expect(try api.send("GET", "/v1/ssh/krl").body.contains(keyID))
        #expect(Self.builds(responder) == 2)
    }

    @Test("a revocation whose write waits for the disk is in the first fetch once it is durable, not a minute later")
    func revocationWaitingForTheDisk() throws {
        let environment = TestEnvironment()
        let keyFile = environment.directory.path + "/ssh-ca.pem"
        try SSHCertificateAuthority.generate(.ed25519).write(to: keyFile)
        let (storage, database, disk) = try environment.stallableStorage()
        let runner = try environment.startServer(storage: storage) {
            $0.threads = 2
            $0.sshCAKeyFile = keyFile
        }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)
        let keyID = Array("keyauth user alice device \(key.publicKey.fingerprint)".utf8)
        #expect(try !api.send("GET", "/v1/ssh/krl").body.contains(keyID))
        #expect(Self.builds(runner.responder) == 1)

        // A batch stalled in its fsync: the revocation's update waits in the next batch,
        // uncommitted, and its answer is held.
        disk.hold()
        _ = try DurabilityScope.run { try database.write { _ in () } }
        #expect(disk.waitUntilStalled())
        let revoking = BackgroundRequest {
            try api.authorized("DELETE", "/v1/devices/\(key.publicKey.fingerprint)", token: token).status
        }
        #expect(eventually { runner.server.heldResponses == 1 })
        // A fetch meanwhile builds the list from what is committed, which has no revocation yet.
        let early = BackgroundRequest { try api.send("GET", "/v1/ssh/krl").status }
        #expect(eventually { Self.builds(runner.responder) == 2 })
        disk.release()
        #expect(revoking.wait() == 204)
        #expect(early.wait() == 200)
        // Once the revocation is durable the list is built again, with it.
        let listed = try api.send("GET", "/v1/ssh/krl")
        #expect(listed.body.contains(keyID))
        #expect(Self.builds(runner.responder) == 3)
    }

    /// `ssh-keygen -Q` of the list `krl` on a certificate of `key` with `keyID`, signed by
    /// `authority`: OpenSSH's own reading of whether the list revokes it.
    static func query(
        _ krl: [UInt8], key: RSAPublicKey, keyID: String, signedBy authority: SSHCertificateAuthority,
        in directory: TemporaryDirectory
    ) throws -> ExternalCommand {
        let name = UUID().uuidString
        try Data(krl).write(to: URL(fileURLWithPath: directory.path + "/\(name).krl"))
        let line = try SSHUserCertificate(
            publicKey: .rsa(key), serial: 7, keyID: keyID, principals: ["alice"], validAfter: 0,
            validBefore: 4_000_000_000, extensions: ["permit-pty": ""]
        ).line(signedBy: authority, nonce: Array(repeating: 1, count: 32), comment: "c")
        try (line + "\n").write(toFile: directory.path + "/\(name)-cert.pub", atomically: true, encoding: .utf8)
        return try ExternalCommand.run(
            ["ssh-keygen", "-Q", "-f", directory.path + "/\(name).krl", directory.path + "/\(name)-cert.pub"],
            timeout: 30)
    }

    /// Alice's device, revoked by herself, and bob's, active.
    static func aliceRevokedBobActive(_ api: TestAPI) throws -> (alice: RSAPrivateKey, bob: RSAPrivateKey) {
        let alice = try ServerTestKeys.key("alice-1")
        let bob = try ServerTestKeys.key("bob-1")
        let token = try api.activeDevice(user: "alice", key: alice)
        _ = try api.activeDevice(user: "bob", key: bob)
        #expect(try api.authorized("DELETE", "/v1/devices/\(alice.publicKey.fingerprint)", token: token).status == 204)
        return (alice, bob)
    }

    @Test("the list names a revoked device's key itself: its certificates of a CA the list does not name are revoked")
    func revokesTheDeviceKeyUnderEveryAuthority() throws {
        let environment = TestEnvironment()
        let (_, api, _, _) = try Self.certificateAuthority(environment)
        let (alice, bob) = try Self.aliceRevokedBobActive(api)
        let krl = try api.send("GET", "/v1/ssh/krl").body

        // A CA that rotation and retirement took out of the list, which a host may still trust.
        let retired = try SSHCertificateAuthority.generate(.ecdsa)
        let revoked = try Self.query(
            krl, key: alice.publicKey, keyID: "keyauth user alice device \(alice.publicKey.fingerprint)",
            signedBy: retired, in: environment.directory)
        #expect(revoked.output.contains("REVOKED"), "\(revoked.output)\(revoked.errorOutput)")
        let kept = try Self.query(
            krl, key: bob.publicKey, keyID: "keyauth user bob device \(bob.publicKey.fingerprint)",
            signedBy: retired, in: environment.directory)
        #expect(kept.status == 0)
        #expect(kept.output.contains("ok"), "\(kept.output)\(kept.errorOutput)")
    }

    @Test("delete-user keeps the deleted devices, revoked before or active, listed until their certificates expire")
    func deletedDevicesStayListed() throws {
        let environment = TestEnvironment()
        let (responder, api, authority, _) = try Self.certificateAuthority(environment)
        let (alice, bob) = try Self.aliceRevokedBobActive(api)
        let aliceID = "keyauth user alice device \(alice.publicKey.fingerprint)"
        let bobID = "keyauth user bob device \(bob.publicKey.fingerprint)"

        // The admin command deletes both users: alice's device was revoked, bob's active.
        let administrator = DeviceRegistry(
            storage: api.storage, pendingLifetime: 600, deviceRetention: 86_400, now: environment.clock.closure)
        let deletedAt = environment.clock.closure()
        _ = try administrator.deleteUser("alice")
        _ = try administrator.deleteUser("bob")
        #expect(try api.storage.allDevices().isEmpty)
        environment.clock.advance(by: SSHRevocationListCache.maximumAge)
        func listed() throws -> [UInt8] {
            let list = try api.send("GET", "/v1/ssh/krl")
            try #require(list.status == 200)
            return list.body
        }
        for (key, keyID) in [(alice, aliceID), (bob, bobID)] {
            #expect(try listed().contains(Array(keyID.utf8)))
            let queried = try Self.query(
                try listed(), key: key.publicKey, keyID: keyID, signedBy: authority, in: environment.directory)
            #expect(queried.output.contains("REVOKED"), "\(queried.output)\(queried.errorOutput)")
        }

        // Until the last certificate issued before the deletion has expired, with the allowance.
        let until = deletedAt + SSHCertificateIssuer.maximumLifetime + SSHCertificateIssuer.backdating
        environment.clock.advance(by: until - 1 - environment.clock.closure())
        responder.purgeExpired()
        #expect(try listed().contains(Array(bobID.utf8)))
        environment.clock.advance(by: 1)
        responder.purgeExpired()
        #expect(try api.storage.sshRevokedKeys(listedAfter: 0).isEmpty)
        environment.clock.advance(by: SSHRevocationListCache.maximumAge)
        #expect(try !listed().contains(Array(aliceID.utf8)))
        #expect(try !listed().contains(Array(bobID.utf8)))
    }

    @Test("an address that fetches without pause gets 429 with Retry-After; another address does not")
    func fetchesAreLimitedPerAddress() throws {
        let environment = TestEnvironment()
        let (_, api, _, _) = try Self.certificateAuthority(environment)
        for index in 0..<AttemptLimits.sshFetchesPerWindow {
            let path = index.isMultiple(of: 2) ? "/v1/ssh/krl" : "/v1/ssh/ca"
            #expect(try api.send("GET", path).status == 200)
        }
        for path in ["/v1/ssh/krl", "/v1/ssh/ca"] {
            let refused = try api.send("GET", path)
            #expect(refused.status == 429)
            #expect(refused.json?["error"]?.stringValue == "slow_down")
            #expect(refused.headers["Retry-After"].flatMap(Int.init) ?? 0 > 0)
        }
        var elsewhere = api
        elsewhere.clientAddress = "198.51.100.7"
        #expect(try elsewhere.send("GET", "/v1/ssh/krl").status == 200)
        environment.clock.advance(by: 61)
        #expect(try api.send("GET", "/v1/ssh/krl").status == 200)
    }

    @Test("If-None-Match matches the list's tag, weakly, in a list, or as *; nothing else")
    func entityTagMatching() {
        let list = SSHRevocationListCache.Snapshot(bytes: [1], entityTag: "\"abc\"")
        #expect(list.isNamed(byIfNoneMatch: "\"abc\""))
        #expect(list.isNamed(byIfNoneMatch: " \"x\" ,\tW/\"abc\""))
        #expect(list.isNamed(byIfNoneMatch: "*"))
        #expect(!list.isNamed(byIfNoneMatch: nil))
        #expect(!list.isNamed(byIfNoneMatch: "abc"))
        #expect(!list.isNamed(byIfNoneMatch: "\"abcd\", \"ab\""))
    }
}

extension Array where Element == UInt8 {
    /// Whether `part` occurs in these bytes.
    fileprivate func contains(_ part: [UInt8]) -> Bool {
        guard !part.isEmpty, part.count <= count else { return part.isEmpty }
        return (0...(count - part.count)).contains { Array(self[$0..<($0 + part.count)]) == part }
    }
}

/// One request on a thread of its own, for a test that holds the server's disk meanwhile.
private final class BackgroundRequest: Sendable {
    private let status = Mutex<Int?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(_ send: @escaping @Sendable () throws -> Int) {
        Thread {
            let answered = (try? send()) ?? 0
            self.status.withLock { $0 = answered }
            self.done.signal()
        }.start()
    }

    /// The status, after up to 30 s; 0 for a failed or missing answer.
    func wait() -> Int {
        guard done.wait(timeout: .now() + 30) == .success else { return 0 }
        return status.withLock { $0 } ?? 0
    }
}
