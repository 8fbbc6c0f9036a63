import Testing

@testable import KeyAuthServer

extension StorageContract {
    static let recoveryCodeChecks = [
        StorageCheck(
            "replaces a user's recovery codes as a set, and uses each once, for its user only",
            StorageContract.keepsRecoveryCodes),
        StorageCheck("uses a contested recovery code for exactly one caller", StorageContract.racesRecoveryCodes),
        StorageCheck(
            "stores a set only while the device that asked is active, also against a revocation at once",
            StorageContract.storesRecoveryCodesOnlyForActiveDevices),
        StorageCheck(
            "leaves exactly one set after replacements at once from several servers",
            StorageContract.racesRecoveryCodeSets),
    ]

    /// A recovery code record of `user` whose salt and hash are `byte` repeated.
    static func recoveryCode(_ byte: UInt8, user: String = "alice") -> RecoveryCodeRecord {
        RecoveryCodeRecord(
            user: user, salt: [UInt8](repeating: byte, count: 16), hash: [UInt8](repeating: byte, count: 32),
            iterations: 1000 + Int64(byte), createdAt: 500)
    }

    static func keepsRecoveryCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.unusedRecoveryCodes(user: "alice").isEmpty)
        try storage.replaceRecoveryCodes(user: "alice", with: [recoveryCode(1), recoveryCode(2), recoveryCode(3)])
        try storage.replaceRecoveryCodes(user: "bob", with: [recoveryCode(9, user: "bob")])
        let stored = try storage.unusedRecoveryCodes(user: "alice")
        // Every field back, in the order stored, with ids that tell them apart.
        #expect(stored.map { [$0.salt.first, $0.hash.first] } == [[1, 1], [2, 2], [3, 3]])
        #expect(stored.map(\.iterations) == [1001, 1002, 1003])
        #expect(stored.allSatisfy { $0.user == "alice" && $0.createdAt == 500 && $0.salt.count == 16 })
        #expect(Set(stored.map(\.id)).count == 3)

        let second = stored[1]
        var bobs = second
        bobs.user = "bob"
        #expect(try !storage.consumeRecoveryCode(bobs, at: 600))
        #expect(try storage.consumeRecoveryCode(second, at: 600))
        #expect(try !storage.consumeRecoveryCode(second, at: 601))
        #expect(try storage.unusedRecoveryCodes(user: "alice").map(\.id) == [stored[0].id, stored[2].id])

        // A new set replaces the old one whole, used codes included; other users keep theirs.
        try storage.replaceRecoveryCodes(user: "alice", with: [recoveryCode(4)])
        let replaced = try storage.unusedRecoveryCodes(user: "alice")
        #expect(replaced.map { $0.salt.first } == [4])
        #expect(try !storage.consumeRecoveryCode(stored[0], at: 700))
        #expect(try storage.unusedRecoveryCodes(user: "bob").count == 1)
        // A set that replaced the newest set may get its ids (SQLite): an old code's row is then
        // the new code's id with the old hash, which uses up nothing.
        try storage.replaceRecoveryCodes(user: "alice", with: [recoveryCode(5)])
        let newest = try #require(try storage.unusedRecoveryCodes(user: "alice").first)
        try storage.replaceRecoveryCodes(user: "alice", with: [recoveryCode(6)])
        var old = newest
        old.id = try #require(try storage.unusedRecoveryCodes(user: "alice").first?.id)
        #expect(try !storage.consumeRecoveryCode(old, at: 800))
        #expect(try storage.unusedRecoveryCodes(user: "alice").count == 1)

        // Deleting a user deletes their codes: a new user of that name starts with none.
        _ = try storage.deleteUser("alice", listingSSHKeysUntil: 0)
        #expect(try storage.unusedRecoveryCodes(user: "alice").isEmpty)
        #expect(try storage.unusedRecoveryCodes(user: "bob").count == 1)
    }

    static func racesRecoveryCodes(_ database: StorageContractDatabase) throws {
        let setup = try database.open()
        try setup.replaceRecoveryCodes(user: "alice", with: [recoveryCode(7)])
        let code = try #require(try setup.unusedRecoveryCodes(user: "alice").first)
        setup.close()
        // Two servers use the same code at the same moment: one wins.
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        let outcomes = runConcurrently(8) { (index: Int) throws(StorageError) -> Bool in
            try (index.isMultiple(of: 2) ? first : second).consumeRecoveryCode(code, at: 800)
        }
        #expect(try outcomes.map { try $0.get() }.filter { $0 }.count == 1)
    }

    static func racesRecoveryCodeSets(_ database: StorageContractDatabase) throws {
        let servers = try (0..<4).map { _ in try database.open() }
        defer { servers.forEach { $0.close() } }
        for round in 0..<3 {
            let outcomes = runConcurrently(8) { (index: Int) throws(StorageError) -> Bool in
                let byte = UInt8(round * 8 + index + 1)
                return try servers[index % servers.count].replaceRecoveryCodes(
                    user: "alice", with: (0..<10).map { _ in recoveryCode(byte) }, whileActive: nil, audit: nil)
            }
            #expect(try outcomes.allSatisfy { try $0.get() })
            // One set of ten, all from one writer: a replacement never leaves two sets.
            let stored = try servers[0].unusedRecoveryCodes(user: "alice")
            #expect(stored.count == 10, "round \(round): \(stored.count) codes")
            #expect(Set(stored.map { $0.salt.first }).count == 1)
        }
    }

    static func storesRecoveryCodesOnlyForActiveDevices(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        #expect(try first.insertDevice(device("kid-phone", status: .active)))
        // The set's audit entry goes in with it, and only with it.
        let audit = AuditEvent(time: 100, action: .recoveryCodes, actor: "device:kid-phone", user: "alice")
        #expect(
            try first.replaceRecoveryCodes(
                user: "alice", with: [recoveryCode(1)], whileActive: "kid-phone", audit: audit))
        #expect(try first.unusedRecoveryCodes(user: "alice").map { $0.salt.first } == [1])
        #expect(try first.auditEvents(since: 0).filter { $0.action == .recoveryCodes }.count == 1)
        // Revoked, unknown or pending: nothing changes, the old set stays.
        #expect(try first.updateStatus(kid: "kid-phone", from: .active, to: .revoked, at: 200))
        #expect(
            try !first.replaceRecoveryCodes(
                user: "alice", with: [recoveryCode(2)], whileActive: "kid-phone", audit: audit))
        #expect(try first.auditEvents(since: 0).filter { $0.action == .recoveryCodes }.count == 1)
        #expect(
            try !first.replaceRecoveryCodes(user: "alice", with: [recoveryCode(3)], whileActive: "kid-none", audit: nil)
        )
        #expect(try first.insertDevice(device("kid-new")))
        #expect(
            try !first.replaceRecoveryCodes(user: "alice", with: [recoveryCode(4)], whileActive: "kid-new", audit: nil))
        #expect(try first.unusedRecoveryCodes(user: "alice").map { $0.salt.first } == [1])
        // A revocation and a new set at once, from two servers: the set is there exactly when its
        // write says it was stored, whichever committed first.
        for round in 0..<4 {
            let kid = "kid-race-\(round)"
            let user = "race\(round)"
            #expect(try first.insertDevice(device(kid, user: user, status: .active)))
            let outcomes = runConcurrently(2) { (index: Int) throws(StorageError) -> Bool in
                index == 0
                    ? try first.updateStatus(kid: kid, from: .active, to: .revoked, at: 300)
                    : try second.replaceRecoveryCodes(
                        user: user, with: [recoveryCode(5, user: user)], whileActive: kid, audit: nil)
            }
            let revoked = try outcomes[0].get()
            let stored = try outcomes[1].get()
            #expect(revoked)
            #expect(try second.unusedRecoveryCodes(user: user).isEmpty == !stored, "round \(round)")
        }
    }
}
