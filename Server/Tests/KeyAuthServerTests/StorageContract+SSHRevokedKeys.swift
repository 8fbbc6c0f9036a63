import KeyAuth
import Testing

@testable import KeyAuthServer

extension StorageContract {
    static let sshRevokedKeyChecks = [
        StorageCheck(
            "keeps a deleted user's active and revoked device keys listed until their time, then purges them",
            StorageContract.listsDeletedSSHKeys),
        StorageCheck(
            "keeps the SSH certificates issued until they expire, serials of all 64 bits, once each",
            StorageContract.recordsSSHCertificates),
    ]

    static func recordsSSHCertificates(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let records = [
            // A serial with the top bit set is negative as a signed integer: it must come back
            // as it went in, and be ordered as the certificate has it.
            SSHCertificateRecord(
                serial: 0xF000_0000_0000_0001, user: "alice", kid: "a-1", principals: ["alice", "deploy"],
                validBefore: 5_000),
            SSHCertificateRecord(serial: 7, user: "bob", kid: "b-1", principals: ["backup"], validBefore: 6_000),
            SSHCertificateRecord(serial: 1 << 62, user: "alice", kid: "a-2", principals: ["alice"], validBefore: 4_000),
        ]
        for record in records { #expect(try storage.recordSSHCertificate(record)) }
        // A serial drawn twice is refused, and the first record stays as it was.
        var again = records[1]
        again.principals = ["root"]
        #expect(try !storage.recordSSHCertificate(again))

        #expect(try storage.sshCertificates(validAfter: 0) == [records[1], records[2], records[0]])
        #expect(try storage.sshCertificates(validAfter: 4_000) == [records[1], records[0]])
        #expect(try storage.sshCertificates(validAfter: 6_000).isEmpty)

        #expect(try storage.purgeSSHCertificates(validUntil: 3_999) == 0)
        #expect(try storage.purgeSSHCertificates(validUntil: 5_000) == 2)
        #expect(try storage.sshCertificates(validAfter: 0) == [records[1]])
    }

    static func listsDeletedSSHKeys(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let states: [(String, DeviceStatus.Stored)] = [
            ("a-active", .active), ("a-revoked", .revoked), ("a-pending", .pending), ("a-denied", .denied),
        ]
        for (kid, status) in states {
            #expect(try storage.insertDevice(device(kid, status: status)))
        }
        #expect(try storage.insertDevice(device("b-active", user: "bob", status: .active)))
        #expect(try storage.sshRevokedKeys(listedAfter: 0).isEmpty)

        // Only the devices that can hold certificates are listed, with everything the list names.
        #expect(try storage.deleteUser("alice", listingSSHKeysUntil: 5_000) == (devices: 4, codes: 0))
        let listed = try storage.sshRevokedKeys(listedAfter: 4_999)
        #expect(listed.map(\.kid) == ["a-active", "a-revoked"])
        #expect(listed.allSatisfy { $0.user == "alice" && $0.listedUntil == 5_000 })
        #expect(listed.first?.publicKeyPEM == device("a-active").publicKeyPEM)
        #expect(try storage.sshRevokedKeys(listedAfter: 5_000).isEmpty)
        #expect(try storage.device(kid: "a-active") == nil)

        // The same key deleted again keeps the later of its two times.
        #expect(try storage.insertDevice(device("a-active", status: .active)))
        _ = try storage.deleteUser("alice", listingSSHKeysUntil: 4_000)
        #expect(try storage.sshRevokedKeys(listedAfter: 0).map(\.listedUntil) == [5_000, 5_000])
        #expect(try storage.insertDevice(device("a-active", status: .revoked)))
        _ = try storage.deleteUser("alice", listingSSHKeysUntil: 6_000)
        #expect(try storage.sshRevokedKeys(listedAfter: 0).map(\.listedUntil) == [6_000, 5_000])

        // The cleanup forgets each once its time has come, and nothing of another user.
        #expect(try storage.purgeSSHRevokedKeys(now: 4_999) == 0)
        #expect(try storage.purgeSSHRevokedKeys(now: 5_000) == 1)
        #expect(try storage.sshRevokedKeys(listedAfter: 0).map(\.kid) == ["a-active"])
        #expect(try storage.purgeSSHRevokedKeys(now: 6_000) == 1)
        #expect(try storage.sshRevokedKeys(listedAfter: 0).isEmpty)
        #expect(try storage.device(kid: "b-active")?.status == .active)
    }
}
