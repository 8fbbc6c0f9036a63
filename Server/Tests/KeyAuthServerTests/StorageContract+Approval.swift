import Foundation
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

extension StorageContract {
    static let approvalChecks = [
        StorageCheck(
            "approves a pending device only while the approving device is active and it has not expired",
            StorageContract.approvesWhileApproverActive),
        StorageCheck(
            "an approval racing the approver's revocation waits for it and approves nothing",
            StorageContract.approvalWaitsForRevocation),
        StorageCheck(
            "an approval keeps the key protection a device stated only as far as its approver's allows",
            StorageContract.approvalCapsKeyProtection),
        StorageCheck(
            "recovery codes keep the key protection of the device that made them",
            StorageContract.recoveryCodesKeepMakersProtection),
        StorageCheck(
            "recovery codes asked by an account page session are stored only while it is signed in",
            StorageContract.recoveryCodesNeedTheAskingSession),
        StorageCheck(
            "approves a page's device request and activates its device together, or changes neither",
            StorageContract.approvesDeviceRequestsWhole),
    ]

    static func approvesDeviceRequestsWhole(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-laptop", status: .active)))
        #expect(try storage.insertDevice(device("kid-stolen", status: .active)))
        for kid in ["kid-new", "kid-late", "kid-next", "kid-other", "kid-done", "kid-denied"] {
            #expect(try storage.insertDevice(device(kid, createdAt: kid == "kid-late" ? 900 : 1_000)))
        }
        #expect(try storage.insertDevice(device("kid-bob", user: "bob")))
        let session = pageSession(1, kid: "kid-laptop")
        try storage.insertBrowserSession(session)
        let limits = SignInRequestLimits(maximumOpen: 20, maximumPerWindow: 1_000)
        let named = [
            ("d1", "kid-new"), ("d2", "kid-late"), ("d3", "kid-next"), ("d4", "kid-other"), ("d5", "kid-done"),
            ("d6", "kid-denied"), ("d7", "kid-bob"),
        ]
        for (id, kid) in named {
            var request = signInRequest(id, kind: .device, askedBy: session)
            request.subject = kid
            #expect(try storage.insertSignInRequest(request, limits: limits, now: 1_000) == .inserted)
        }
        func approve(_ id: String, _ kid: String, by approver: String = "kid-laptop") throws
            -> DeviceRequestApprovalOutcome
        {
            try storage.approveDeviceSignInRequest(
                id: id, device: kid, answeringKID: approver, methods: ["swk", "pin"], at: 1_010,
                askingSession: session.idHash, createdAfter: 950)
        }
        // The device's pending lifetime is over, the approver was revoked, or the request was
        // answered already: the request keeps its state and the device stays pending.
        #expect(try approve("d2", "kid-late") == .deviceNotPending)
        // A device the request does not name, or another user's, is not activated through it;
        // nor one denied since the request was made.
        #expect(try approve("d2", "kid-next") == .deviceNotPending)
        #expect(try approve("d7", "kid-bob") == .deviceNotPending)
        #expect(try storage.updateStatus(kid: "kid-denied", from: .pending, to: .denied, at: 1_002))
        #expect(try approve("d6", "kid-denied") == .deviceNotPending)
        #expect(try storage.updateStatus(kid: "kid-stolen", from: .active, to: .revoked, at: 1_005))
        #expect(try approve("d3", "kid-next", by: "kid-stolen") == .approverNotActive)
        #expect(
            try storage.answerSignInRequest(
                id: "d4", status: .denied, answeringKID: "kid-laptop", methods: [], at: 1_008))
        #expect(try approve("d4", "kid-other") == .requestNotOpen)
        for id in ["d2", "d3", "d6", "d7"] {
            let request = try storage.signInRequest(id: id)
            #expect(request?.status == .pending && request?.answeringKID == nil, "\(id)")
        }
        #expect(try storage.signInRequest(id: "d4")?.status == .denied)
        for kid in ["kid-late", "kid-next", "kid-other", "kid-bob"] {
            #expect(try storage.device(kid: kid)?.status == .pending, "\(kid)")
        }
        // An approval that goes through: the request is used up and the device active, at once.
        #expect(try approve("d1", "kid-new") == .approved)
        let answered = try storage.signInRequest(id: "d1")
        #expect(answered?.status == .issued && answered?.answeringKID == "kid-laptop")
        let activated = try storage.device(kid: "kid-new")
        #expect(activated?.status == .active && activated?.approvedAt == 1_010)
        #expect(try approve("d1", "kid-new") == .requestNotOpen)
        // A device approved another way meanwhile: the answer stands and is used up.
        #expect(
            try storage.approvePendingDevice(kid: "kid-done", approvedBy: "kid-laptop", at: 1_005, createdAfter: 0)
                == .approved)
        #expect(try approve("d5", "kid-done") == .alreadyActive)
        #expect(try storage.signInRequest(id: "d5")?.status == .issued)
        #expect(try storage.device(kid: "kid-done")?.approvedAt == 1_005)
        // The one rolled back left the storage usable: the next answer is written.
        #expect(try approve("d2", "kid-late") == .deviceNotPending)
        #expect(try approve("d3", "kid-next") == .approved)
    }

    static func recoveryCodesKeepMakersProtection(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        for (kid, protection) in [("kid-pin", KeyProtection.pin), ("kid-plain", KeyProtection.withoutPIN)] {
            var record = device(kid, status: .active)
            record.keyProtection = protection
            #expect(try storage.insertDevice(record))
        }
        #expect(try storage.insertDevice(device("kid-old", status: .active)))
        let code = RecoveryCodeRecord(
            user: "alice", salt: [1, 2], hash: [3, 4], iterations: 1000, createdAt: 1_000)
        // (the device that makes the set, or nil for none, what the codes keep)
        for (maker, expected) in [
            ("kid-pin", KeyProtection.pin), ("kid-plain", KeyProtection.withoutPIN), ("kid-old", nil),
            (nil, KeyProtection.pin),
        ] as [(String?, KeyProtection?)] {
            #expect(
                try storage.replaceRecoveryCodes(user: "alice", with: [code, code], whileActive: maker, audit: nil))
            let stored = try storage.unusedRecoveryCodes(user: "alice")
            #expect(stored.count == 2 && stored.allSatisfy { $0.keyProtection == expected }, "\(maker ?? "none")")
        }
    }

    static func recoveryCodesNeedTheAskingSession(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        for kid in ["kid-laptop", "kid-phone"] { #expect(try storage.insertDevice(device(kid, status: .active))) }
        #expect(try storage.insertDevice(device("kid-bob", user: "bob", status: .active)))
        let session = pageSession(2, kid: "kid-laptop")
        let bobs = pageSession(3, user: "bob", kid: "kid-bob")
        for record in [session, bobs] { try storage.insertBrowserSession(record) }
        let code = RecoveryCodeRecord(user: "alice", salt: [1], hash: [2], iterations: 1000, createdAt: 1_000)
        func replace(askedBy idHash: [UInt8], at time: Int64, count: Int) throws -> Bool {
            try storage.replaceRecoveryCodes(
                user: "alice", with: Array(repeating: code, count: count), whileActive: "kid-phone",
                askedBy: (idHash, time), audit: nil)
        }
        #expect(try replace(askedBy: session.idHash, at: 1_010, count: 3))
        // Past the session's expiry, another user's session, no session at all: nothing changes.
        #expect(try !replace(askedBy: session.idHash, at: 1_200, count: 4))
        #expect(try !replace(askedBy: bobs.idHash, at: 1_010, count: 4))
        #expect(try !replace(askedBy: [UInt8](repeating: 9, count: 32), at: 1_010, count: 4))
        // The device that signed the session in is revoked (which ends the session) while the
        // codes are hashed: the set made for that session is not stored.
        #expect(
            try storage.revokeOrDeny(
                kid: "kid-laptop", from: .active, to: .revoked, at: 1_020, audit: audit("kid-laptop", user: "alice")))
        #expect(try !replace(askedBy: session.idHash, at: 1_030, count: 4))
        #expect(try storage.unusedRecoveryCodes(user: "alice").count == 3)
    }

    static func approvalCapsKeyProtection(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        func insert(_ kid: String, _ protection: KeyProtection?, status: DeviceStatus.Stored = .pending) throws {
            var record = device(kid, status: status)
            record.keyProtection = protection
            #expect(try storage.insertDevice(record))
        }
        try insert("kid-pin", .pin, status: .active)
        try insert("kid-plain", KeyProtection.withoutPIN, status: .active)
        try insert("kid-old", nil, status: .active)
        #expect(try storage.device(kid: "kid-pin")?.keyProtection == .pin)
        #expect(try storage.device(kid: "kid-plain")?.keyProtection == KeyProtection.withoutPIN)
        #expect(try storage.device(kid: "kid-old")?.keyProtection == nil)
        // (new device's statement, approver or nil for the operator, what the approval leaves)
        let cases: [(KeyProtection?, String?, KeyProtection?)] = [
            (.pin, "kid-pin", .pin), (.pin, "kid-plain", KeyProtection.withoutPIN), (.pin, "kid-old", nil),
            (.pin, nil, .pin), (KeyProtection.withoutPIN, "kid-pin", KeyProtection.withoutPIN), (nil, "kid-pin", nil),
            (nil, "kid-plain", KeyProtection.withoutPIN), (KeyProtection.withoutPIN, nil, KeyProtection.withoutPIN),
        ]
        for (index, (stated, approver, expected)) in cases.enumerated() {
            let kid = "kid-new-\(index)"
            try insert(kid, stated)
            #expect(
                try storage.approvePendingDevice(kid: kid, approvedBy: approver, at: 2_000, createdAfter: 0)
                    == .approved)
            let approved = try storage.device(kid: kid)
            #expect(approved?.status == .active, "\(index)")
            #expect(
                approved?.keyProtection == expected,
                "\(index): \(String(describing: stated)) by \(approver ?? "operator")")
        }
    }

    static func approvesWhileApproverActive(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-laptop", status: .active)))
        #expect(try storage.insertDevice(device("kid-stolen", status: .active)))
        #expect(try storage.insertDevice(device("kid-new")))
        #expect(try storage.updateStatus(kid: "kid-stolen", from: .active, to: .revoked, at: 1_500))

        #expect(
            try storage.approvePendingDevice(kid: "kid-new", approvedBy: "kid-stolen", at: 2_000, createdAfter: 0)
                == .approverNotActive)
        #expect(
            try storage.approvePendingDevice(kid: "kid-new", approvedBy: "kid-unknown", at: 2_000, createdAfter: 0)
                == .approverNotActive
        )
        #expect(try storage.device(kid: "kid-new")?.status == .pending)
        #expect(
            try storage.approvePendingDevice(kid: "kid-new", approvedBy: "kid-laptop", at: 2_000, createdAfter: 0)
                == .approved)
        let approved = try storage.device(kid: "kid-new")
        #expect(approved?.status == .active && approved?.approvedAt == 2_000)
        #expect(
            try storage.approvePendingDevice(kid: "kid-new", approvedBy: "kid-laptop", at: 3_000, createdAfter: 0)
                == .notPending)
        // The operator needs no approving device.
        #expect(try storage.insertDevice(device("kid-admin")))
        #expect(
            try storage.approvePendingDevice(kid: "kid-admin", approvedBy: nil, at: 3_000, createdAfter: 0) == .approved
        )
        #expect(
            try storage.approvePendingDevice(kid: "kid-missing", approvedBy: nil, at: 3_000, createdAfter: 0)
                == .notPending)
        // A device whose pending lifetime is over stays pending: the check is in the update.
        #expect(try storage.insertDevice(device("kid-late", createdAt: 1_000)))
        #expect(
            try storage.approvePendingDevice(kid: "kid-late", approvedBy: "kid-laptop", at: 3_000, createdAfter: 1_000)
                == .notPending)
        #expect(try storage.device(kid: "kid-late")?.status == .pending)
        #expect(
            try storage.approvePendingDevice(kid: "kid-late", approvedBy: "kid-laptop", at: 3_000, createdAfter: 999)
                == .approved)
    }

    /// A revocation of the approver is under way (its transaction holds the row) when the
    /// approval starts; it commits half a second later. The approval must wait and then find the
    /// approver revoked. Reading the row without a lock, PostgreSQL's approval would see the
    /// last committed status, active, and approve: the revoked device would have let a device
    /// in after its revocation returned.
    static func approvalWaitsForRevocation(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-stolen", status: .active)))
        #expect(try storage.insertDevice(device("kid-new")))

        let revocation = try database.connect()
        try revocation.execute("BEGIN")
        try revocation.execute("UPDATE devices SET status = 'revoked', revoked_at = 1500 WHERE kid = 'kid-stolen'")
        let outcome = Mutex<Result<DeviceApprovalOutcome, StorageError>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        Thread {
            let result = Result { () throws(StorageError) in
                try storage.approvePendingDevice(kid: "kid-new", approvedBy: "kid-stolen", at: 2_000, createdAfter: 0)
            }
            outcome.withLock { $0 = result }
            finished.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.5)
        try revocation.execute("COMMIT")
        #expect(finished.wait(timeout: .now() + 60) == .success)
        let result = try #require(outcome.withLock { $0 })
        #expect(try result.get() == .approverNotActive)
        #expect(try storage.device(kid: "kid-new")?.status == .pending)
    }
}
