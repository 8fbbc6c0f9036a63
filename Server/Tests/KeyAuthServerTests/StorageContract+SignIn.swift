import Foundation
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// The storage contract of sign-in by approval (``SignInStorage``): clients, sign-in requests and
/// browser sessions, on every backend, with the races settled in storage.
extension StorageContract {
    static let signInChecks: [StorageCheck] = [
        StorageCheck("renames a device, and only one that exists", StorageContract.renamesDevices),
        StorageCheck("raises a device's tier only from the tier it still has", StorageContract.raisesTiers),
        StorageCheck("keeps clients, each id once, oldest first", StorageContract.storesClients),
        StorageCheck(
            "caps a user's open sign-in requests, counting only pending unexpired ones",
            StorageContract.capsSignInRequests),
        StorageCheck(
            "limits requests per origin over an hour, and replaces an open one from the same address",
            StorageContract.limitsSignInRequestsByOrigin),
        StorageCheck(
            "counts wrong codes and denies the request at the last attempt, once, across instances",
            StorageContract.countsWrongCodes),
        StorageCheck(
            "hands an approval out only while its device is active and the request's user's",
            StorageContract.collectsOnlyFromActiveDevices),
        StorageCheck(
            "deletes a user's approvals with the user: requests, sessions and unredeemed codes",
            StorageContract.deletesApprovalsWithTheUser),
        StorageCheck(
            "answers a sign-in request once, before expiry, and hands its result out once",
            StorageContract.answersSignInRequests),
        StorageCheck(
            "hands an approval out only while its grace past the expiry lasts, checked in the update",
            StorageContract.collectsWithinTheGrace),
        StorageCheck(
            "lists a user's approvals of a kind that can still be collected, oldest first",
            StorageContract.listsCollectableApprovals),
        StorageCheck(
            "marks a poll too early within the interval and grows the interval", StorageContract.pollsSignInRequests),
        StorageCheck(
            "settles concurrent requests, answers and collections across instances with the right winners",
            StorageContract.racesSignInRequests),
        StorageCheck(
            "keeps browser sessions by hash: replaced once, extended, ended by device and by expiry",
            StorageContract.storesBrowserSessions),
        StorageCheck(
            "withdraws only a pending, unexpired request, which then is no longer open",
            StorageContract.withdrawsSignInRequests),
        StorageCheck(
            "approves a page's request only while the session that asked is stored, live and its user's",
            StorageContract.answersForTheAskingSession),
        StorageCheck(
            "settles an approval racing the revocation of its session's device: one of them first, no error",
            StorageContract.racesApprovalAndRevocation),
        StorageCheck(
            "waits for a revocation holding the session's device, then finds the device revoked",
            StorageContract.approvalWaitsForRevocationOfTheSession),
        StorageCheck(
            "waits for a sign-out deleting the session, then finds the session gone",
            StorageContract.approvalWaitsForSignOut),
    ]

    /// A revocation of the device that signed the asking session in holds the device's row when
    /// the approval starts; half a second later it deletes the session and commits, as
    /// `revokeOrDeny` does. The approval must wait for the device and find it revoked. Locking
    /// the session before the device, it would deadlock with the revocation.
    static func approvalWaitsForRevocationOfTheSession(_ database: StorageContractDatabase) throws {
        try approvalWaits(
            database,
            ending: [
                "UPDATE devices SET status = 'revoked', revoked_at = 1005 WHERE kid = 'kid-1'",
                "DELETE FROM browser_sessions WHERE approving_kid = 'kid-1'",
            ])
    }

    /// A sign-out's deletion of the asking session is under way (its transaction holds the
    /// session's row) when the approval starts, and commits half a second later. The approval
    /// must wait for the session's row and find it gone: trusting its first, unlocked read of
    /// the session, it would approve.
    static func approvalWaitsForSignOut(_ database: StorageContractDatabase) throws {
        try approvalWaits(database, ending: ["DELETE FROM browser_sessions WHERE approving_kid = 'kid-1'"])
    }

    /// Runs `ending` in a transaction of its own, starts an approval of a request of the
    /// session it ends, and commits half a second later: the approval must approve nothing.
    private static func approvalWaits(_ database: StorageContractDatabase, ending: [String]) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        let session = pageSession(1, kid: "kid-1")
        try storage.insertBrowserSession(session)
        let request = signInRequest("r1", askedBy: session)
        #expect(try storage.insertSignInRequest(request, limits: Self.threeOpen, now: 1_000) == .inserted)

        let ender = try database.connect()
        try ender.execute("BEGIN")
        for statement in ending { try ender.execute(statement) }
        let outcome = Mutex<Result<Bool, StorageError>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        let askingSession = session.idHash
        Thread {
            let result = Result { () throws(StorageError) in
                try storage.answerSignInRequest(
                    id: "r1", status: .approved, answeringKID: "kid-1", methods: ["pin"], at: 1_010,
                    askingSession: askingSession)
            }
            outcome.withLock { $0 = result }
            finished.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.5)
        try ender.execute("COMMIT")
        #expect(finished.wait(timeout: .now() + 60) == .success)
        let result = try #require(outcome.withLock { $0 })
        #expect(try result.get() == false)
        #expect(try storage.signInRequest(id: "r1")?.status == .pending)
    }

    static func racesApprovalAndRevocation(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        let limits = SignInRequestLimits(maximumOpen: 100, maximumPerWindow: 1_000)
        #expect(try first.insertDevice(device("approver", status: .active)))
        for round in 0..<20 {
            let kid = "kid-\(round)"
            #expect(try first.insertDevice(device(kid, status: .active)))
            let session = pageSession(UInt8(round), kid: kid)
            try first.insertBrowserSession(session)
            let request = signInRequest("race-\(round)", askedBy: session)
            #expect(try first.insertSignInRequest(request, limits: limits, now: 1_000) == .inserted)
            let revocation = AuditEvent(time: 1_020, action: .revoke, actor: "admin", user: "alice", subject: kid)
            let (id, askingSession) = (request.id, session.idHash)
            let outcomes = runConcurrently(2) { (index: Int) throws(StorageError) -> Bool in
                if index == 0 {
                    return try first.answerSignInRequest(
                        id: id, status: .approved, answeringKID: "approver", methods: ["pin"], at: 1_010,
                        askingSession: askingSession)
                }
                return try second.revokeOrDeny(kid: kid, from: .active, to: .revoked, at: 1_020, audit: revocation)
            }
            let approved = try outcomes[0].get()
            #expect(try outcomes[1].get())
            // The approval came first and stands, or the revocation did and withdrew the request.
            let stored = try #require(try first.signInRequest(id: id))
            #expect(stored.status == (approved ? .approved : .pending))
            #expect(stored.expiresAt == (approved ? 1_300 : 1_020 - ClockSkewCheck.purgeMargin))
            #expect(try first.browserSession(idHash: session.idHash) == nil)
        }
    }

    static func answersForTheAskingSession(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.insertDevice(device("kid-2", status: .active)))
        #expect(try storage.insertDevice(device("kid-3", user: "bob", status: .active)))
        let live = pageSession(1, kid: "kid-1")
        let signedOut = pageSession(2, kid: "kid-2")
        let bobs = pageSession(3, user: "bob", kid: "kid-3")
        let waiting = pageSession(4, kid: nil)
        let other = pageSession(5, kid: "kid-2")
        for record in [live, signedOut, bobs, waiting, other] { try storage.insertBrowserSession(record) }
        let limits = SignInRequestLimits(maximumOpen: 20, maximumPerWindow: 1_000)
        // Each request made by the session named.
        let made: [(String, BrowserSessionRecord)] = [
            ("a1", live), ("a2", live), ("a3", bobs), ("a4", waiting), ("a5", signedOut), ("a6", live),
            ("a7", other), ("a8", live), ("a9", live),
        ]
        for (id, record) in made {
            let request = signInRequest(id, kind: id == "a9" ? .recoveryCodes : .device, askedBy: record)
            #expect(try storage.insertSignInRequest(request, limits: limits, now: 1_000) == .inserted)
        }
        func approve(_ id: String, at time: Int64 = 1_010, for record: BrowserSessionRecord?) throws -> Bool {
            try storage.answerSignInRequest(
                id: id, status: .approved, answeringKID: "kid-2", methods: ["pin"], at: time,
                askingSession: record?.idHash)
        }
        #expect(try approve("a1", for: live))
        // The session expired at the answer's time; another user's session; one not signed in.
        #expect(try !approve("a2", at: 1_200, for: live))
        #expect(try !approve("a3", for: bobs))
        #expect(try !approve("a4", for: waiting))
        // Signed out before its requests were withdrawn: the moment the service's own check
        // cannot see, as the update comes after it.
        try storage.deleteBrowserSession(idHash: signedOut.idHash)
        #expect(try !approve("a5", for: signedOut))
        // Another live session of the same user, and no session at all, approve nothing.
        #expect(try !approve("a7", for: live))
        #expect(try !approve("a8", for: nil))
        #expect(try !approve("a9", for: nil))
        // The device that signed the session in was revoked.
        #expect(try storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 1_020))
        #expect(try !approve("a6", at: 1_030, for: live))
        for id in ["a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"] {
            #expect(try storage.signInRequest(id: id)?.status == .pending, "\(id)")
        }
        // A denial needs no session.
        #expect(
            try storage.answerSignInRequest(id: "a8", status: .denied, answeringKID: "kid-2", methods: [], at: 1_040))
        #expect(try storage.signInRequest(id: "a8")?.status == .denied)
    }

    static func withdrawsSignInRequests(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        let limits = SignInRequestLimits(maximumOpen: 10, maximumPerWindow: 1_000)
        for id in ["w1", "w2", "w3"] {
            #expect(try storage.insertSignInRequest(signInRequest(id), limits: limits, now: 1_000) == .inserted)
        }
        #expect(
            try storage.answerSignInRequest(id: "w2", status: .approved, answeringKID: "kid-1", methods: [], at: 1_010))
        #expect(try storage.withdrawSignInRequest(id: "w1", at: 1_020))
        #expect(try !storage.withdrawSignInRequest(id: "w1", at: 1_021))
        #expect(try storage.signInRequest(id: "w1")?.expiresAt == 1_020 - ClockSkewCheck.purgeMargin)
        // An answered request keeps its answer and its expiry; an expired or unknown one is left.
        #expect(try !storage.withdrawSignInRequest(id: "w2", at: 1_020))
        #expect(try storage.signInRequest(id: "w2")?.expiresAt == 1_300)
        #expect(try !storage.withdrawSignInRequest(id: "w3", at: 1_300))
        #expect(try !storage.withdrawSignInRequest(id: "nope", at: 1_020))
        #expect(try storage.openSignInRequests(user: "alice", now: 1_020).map(\.id) == ["w3"])
        #expect(
            try !storage.answerSignInRequest(id: "w1", status: .approved, answeringKID: "kid-1", methods: [], at: 1_030)
        )
        // An instance whose clock is behind the withdrawing one's (as far as `serve` lets one
        // start) neither lists nor approves it: the expiry is not the withdrawing clock's moment.
        let behind = 1_020 - 2 * ClockSkewCheck.refusalBound
        #expect(try storage.openSignInRequests(user: "alice", now: behind).map(\.id) == ["w3"])
        #expect(
            try !storage.answerSignInRequest(
                id: "w1", status: .approved, answeringKID: "kid-1", methods: [], at: behind)
        )
        // So is every request of a session's tag.
        var tagged = signInRequest("w4")
        tagged.requestedBy = "session-tag"
        #expect(try storage.insertSignInRequest(tagged, limits: limits, now: 1_000) == .inserted)
        try storage.withdrawSignInRequests(requestedBy: "session-tag", at: 1_020)
        #expect(
            try !storage.answerSignInRequest(
                id: "w4", status: .approved, answeringKID: "kid-1", methods: [], at: behind)
        )
    }

    static func signInRequest(
        _ id: String, user: String = "alice", createdAt: Int64 = 1_000, expiresAt: Int64 = 1_300,
        kind: SignInRequestKind = .backchannel, from address: String = "192.0.2.7"
    ) -> SignInRequestRecord {
        SignInRequestRecord(
            id: id, kind: kind, clientID: kind == .backchannel ? "client-1" : nil, user: user,
            bindingMessage: "Desk – 42", scope: "openid profile", requestedFrom: address, createdAt: createdAt,
            expiresAt: expiresAt, subject: kind == .device ? "kid-9" : nil,
            acrValues: kind == .backchannel ? ["urn:keyauth:acr:attested", "urn:keyauth:acr:hwk"] : [],
            requestedBy: kind == .device ? "c2Vzc2lvbi1oYXNo" : nil)
    }

    /// A page session of `user` (its id hash `byte` repeated) until 1_200, signed in at 1_000 by
    /// `kid`, or waiting without one.
    static func pageSession(_ byte: UInt8, user: String = "alice", kid: String?) -> BrowserSessionRecord {
        var record = BrowserSessionRecord(
            idHash: [UInt8](repeating: byte, count: 32), csrfToken: "csrf", user: user, signInRequestID: nil,
            bindingCode: "42", createdAt: 1_000, expiresAt: 1_200)
        record.approvingKID = kid
        record.methods = kid == nil ? [] : ["swk", "pin"]
        record.signedInAt = kid == nil ? nil : 1_000
        return record
    }

    /// ``signInRequest(_:user:createdAt:expiresAt:kind:from:)`` of an account page's `kind`,
    /// made by `session`.
    static func signInRequest(
        _ id: String, kind: SignInRequestKind = .device, askedBy session: BrowserSessionRecord
    ) -> SignInRequestRecord {
        var request = signInRequest(id, kind: kind)
        request.requestedBy = session.requestTag
        return request
    }

    /// Three open requests at most, with no hourly limit that matters.
    static let threeOpen = SignInRequestLimits(maximumOpen: 3, maximumPerWindow: 1_000)

    static func limitsSignInRequestsByOrigin(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let hourly = SignInRequestLimits(maximumOpen: 10, maximumPerWindow: 2, window: 3_600)
        #expect(
            try storage.insertSignInRequest(signInRequest("c1", expiresAt: 1_001), limits: hourly, now: 1_000)
                == .inserted)
        #expect(
            try storage.insertSignInRequest(signInRequest("c2", createdAt: 1_500), limits: hourly, now: 1_500)
                == .inserted)
        // Two in the hour, even though the first expired long ago: the third waits for the first
        // to leave the window.
        #expect(
            try storage.insertSignInRequest(signInRequest("c3", createdAt: 2_000), limits: hourly, now: 2_000)
                == .tooManyInWindow(retryAt: 4_600))
        #expect(
            try storage.insertSignInRequest(
                signInRequest("c3", createdAt: 4_601, expiresAt: 5_000), limits: hourly, now: 4_601) == .inserted)
        // Another origin has limits of its own: the client's requests use up nothing of the
        // browsers'.
        let browsers = SignInRequestLimits(maximumOpen: 2, maximumPerWindow: 10, replacesSameAddress: true)
        let first = signInRequest("a1", createdAt: 4_601, expiresAt: 4_900, kind: .account, from: "198.51.100.1")
        #expect(try storage.insertSignInRequest(first, limits: browsers, now: 4_601) == .inserted)
        // The same address again replaces its open request: the first one is withdrawn, expired
        // on the clock of an instance behind this one too.
        let again = signInRequest("a2", createdAt: 4_602, expiresAt: 4_900, kind: .authorization, from: "198.51.100.1")
        #expect(try storage.insertSignInRequest(again, limits: browsers, now: 4_602) == .inserted)
        #expect(try storage.signInRequest(id: "a1")?.expiresAt == 4_602 - ClockSkewCheck.purgeMargin)
        #expect(try storage.openSignInRequests(user: "alice", now: 4_602).map(\.id) == ["c3", "a2"])
        let other = signInRequest("a3", createdAt: 4_603, expiresAt: 4_900, kind: .account, from: "198.51.100.2")
        #expect(try storage.insertSignInRequest(other, limits: browsers, now: 4_603) == .inserted)
        let third = signInRequest("a4", createdAt: 4_604, expiresAt: 4_900, kind: .account, from: "198.51.100.3")
        #expect(
            try storage.insertSignInRequest(third, limits: browsers, now: 4_604) == .tooManyOpen(earliestExpiry: 4_900))
        // The new columns come back as stored.
        let device = signInRequest("d1", createdAt: 4_605, kind: .device)
        #expect(try storage.insertSignInRequest(device, limits: hourly, now: 4_605) == .inserted)
        #expect(try storage.signInRequest(id: "d1")?.subject == "kid-9")
        #expect(try storage.signInRequest(id: "d1")?.kind == .device)
        #expect(try storage.signInRequest(id: "d1")?.requestedBy == "c2Vzc2lvbi1oYXNo")

        // The share of one address counts an IPv6 /64 as one, as the rate limits do: a host
        // picking a new address of its /64 for each request gets no new share.
        let shared = SignInRequestLimits(maximumOpen: 100, maximumPerWindow: 100, maximumPerWindowFromAddress: 2)
        for (index, address) in ["2001:db8::1", "2001:db8:0:0:ffff::2"].enumerated() {
            let request = signInRequest("v\(index)", user: "bob", createdAt: 5_000, kind: .account, from: address)
            #expect(try storage.insertSignInRequest(request, limits: shared, now: 5_000) == .inserted)
        }
        let sameHost = signInRequest("v2", user: "bob", createdAt: 5_001, kind: .account, from: "2001:db8::3")
        #expect(
            try storage.insertSignInRequest(sameHost, limits: shared, now: 5_001) == .tooManyInWindow(retryAt: 8_600))
        let otherHost = signInRequest("v3", user: "bob", createdAt: 5_001, kind: .account, from: "2001:db8:1::3")
        #expect(try storage.insertSignInRequest(otherHost, limits: shared, now: 5_001) == .inserted)
        // And a new start replaces the open one of its /64, as of its address.
        let replacing = SignInRequestLimits(maximumOpen: 2, maximumPerWindow: 100, replacesSameAddress: true)
        for (index, address) in ["2001:db8::1", "2001:db8::2", "2001:db8::3"].enumerated() {
            let request = signInRequest(
                "r\(index)", user: "carol", createdAt: 5_000 + Int64(index), expiresAt: 5_300, kind: .account,
                from: address)
            #expect(try storage.insertSignInRequest(request, limits: replacing, now: 5_000 + Int64(index)) == .inserted)
        }
        #expect(try storage.openSignInRequests(user: "carol", now: 5_003).map(\.id) == ["r2"])
        #expect(try storage.signInRequest(id: "r0")?.expiresAt == 5_001 - ClockSkewCheck.purgeMargin)
    }

    static func countsWrongCodes(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        #expect(try first.insertSignInRequest(signInRequest("w1"), limits: threeOpen, now: 1_000) == .inserted)
        #expect(try first.recordWrongCode(id: "nope", maximumAttempts: 3, answeringKID: "k", at: 1_001) == .closed)
        #expect(
            try first.recordWrongCode(id: "w1", maximumAttempts: 3, answeringKID: "k", at: 1_001)
                == .tryAgain(attemptsLeft: 2))
        #expect(try second.signInRequest(id: "w1")?.codeAttempts == 1)
        // Two instances at once for the last two attempts: one is told to try again, one denies.
        let outcomes = runConcurrently(2) { (index: Int) throws(StorageError) -> WrongCodeOutcome in
            try (index == 0 ? first : second).recordWrongCode(
                id: "w1", maximumAttempts: 3, answeringKID: "kid-\(index)", at: 1_002)
        }
        let results = try outcomes.map { try $0.get() }
        #expect(results.contains(.tryAgain(attemptsLeft: 1)) && results.contains(.denied))
        let denied = try #require(try first.signInRequest(id: "w1"))
        #expect(denied.status == .denied && denied.answeredAt == 1_002 && denied.codeAttempts == 3)
        #expect(try second.recordWrongCode(id: "w1", maximumAttempts: 3, answeringKID: "k", at: 1_003) == .closed)
        // An expired request counts nothing.
        #expect(try first.insertSignInRequest(signInRequest("w2"), limits: threeOpen, now: 1_000) == .inserted)
        #expect(try first.recordWrongCode(id: "w2", maximumAttempts: 3, answeringKID: "k", at: 1_300) == .closed)
    }

    static func renamesDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.renameDevice(kid: "kid-1", name: "desk – ünïcode"))
        #expect(try storage.device(kid: "kid-1")?.name == "desk – ünïcode")
        #expect(try !storage.renameDevice(kid: "kid-2", name: "other"))
    }

    static func raisesTiers(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.device(kid: "kid-1")?.tier == .software)
        #expect(try storage.raiseTier(kid: "kid-1", from: .software, to: .tpmUnverified))
        // A second attestation that read the old tier changes nothing.
        #expect(try !storage.raiseTier(kid: "kid-1", from: .software, to: .attested))
        #expect(try storage.device(kid: "kid-1")?.tier == .tpmUnverified)
        #expect(try storage.raiseTier(kid: "kid-1", from: .tpmUnverified, to: .attested))
        #expect(try storage.device(kid: "kid-1")?.tier == .attested)
        #expect(try !storage.raiseTier(kid: "kid-2", from: .software, to: .attested))
    }

    static func storesClients(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let hash = (0..<32).map { UInt8($0 * 7 % 256) }
        let second = ClientRecord(id: "client-b", name: "Kiosk", secretHash: hash, createdAt: 20)
        let first = ClientRecord(id: "client-a", name: "Support desk – ünïcode", secretHash: hash, createdAt: 10)
        #expect(try storage.insertClient(second))
        #expect(try storage.insertClient(first))
        #expect(try !storage.insertClient(ClientRecord(id: "client-a", name: "Other", secretHash: [], createdAt: 30)))
        #expect(try storage.client(id: "client-a") == first)
        #expect(try storage.client(id: "client-c") == nil)
        #expect(try storage.allClients().map(\.id) == ["client-a", "client-b"])
        #expect(try storage.deleteClient(id: "client-a"))
        #expect(try !storage.deleteClient(id: "client-a"))
        #expect(try storage.allClients() == [second])
    }

    static func capsSignInRequests(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        // An expired one and an answered one do not count.
        #expect(
            try storage.insertSignInRequest(signInRequest("r0", expiresAt: 999), limits: Self.threeOpen, now: 1_000)
                == .inserted)
        #expect(try storage.insertSignInRequest(signInRequest("r1"), limits: Self.threeOpen, now: 1_000) == .inserted)
        #expect(try storage.answerSignInRequest(id: "r1", status: .denied, answeringKID: "k", methods: [], at: 1_001))
        for (index, expiry) in [(2, 1_200), (3, 1_100), (4, 1_250)] {
            let record = signInRequest("r\(index)", createdAt: 1_000 + Int64(index), expiresAt: Int64(expiry))
            #expect(try storage.insertSignInRequest(record, limits: Self.threeOpen, now: 1_010) == .inserted)
        }
        #expect(
            try storage.insertSignInRequest(signInRequest("r5"), limits: Self.threeOpen, now: 1_010)
                == .tooManyOpen(earliestExpiry: 1_100))
        #expect(
            try storage.insertSignInRequest(signInRequest("b1", user: "bob"), limits: Self.threeOpen, now: 1_010)
                == .inserted)
        #expect(try storage.openSignInRequests(user: "alice", now: 1_010).map(\.id) == ["r2", "r3", "r4"])
        // Once r3 expired, a place is free.
        #expect(
            try storage.insertSignInRequest(signInRequest("r5", createdAt: 1_100), limits: Self.threeOpen, now: 1_100)
                == .inserted)
        #expect(try storage.openSignInRequests(user: "alice", now: 1_100).map(\.id) == ["r2", "r4", "r5"])
        #expect(try storage.signInRequest(id: "r5") == signInRequest("r5", createdAt: 1_100))
        #expect(try storage.signInRequest(id: "nope") == nil)
        // Purging deletes what expired before the time given, whatever its state.
        #expect(try storage.purgeSignInRequests(expiredBefore: 1_200) == 2)
        #expect(try storage.signInRequest(id: "r0") == nil && storage.signInRequest(id: "r3") == nil)
        #expect(try storage.signInRequest(id: "r1")?.status == .denied)
    }

    static func answersSignInRequests(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.insertSignInRequest(signInRequest("r1"), limits: Self.threeOpen, now: 1_000) == .inserted)
        #expect(try storage.insertSignInRequest(signInRequest("r2"), limits: Self.threeOpen, now: 1_000) == .inserted)
        #expect(try !storage.markSignInRequestIssued(id: "r1", expiringAfter: 1_000))
        #expect(
            try storage.answerSignInRequest(
                id: "r1", status: .approved, answeringKID: "kid-1", methods: ["hwk", "pin"], at: 1_050))
        #expect(
            try !storage.answerSignInRequest(id: "r1", status: .denied, answeringKID: "kid-2", methods: [], at: 1_051))
        let answered = try #require(try storage.signInRequest(id: "r1"))
        #expect(answered.status == .approved && answered.answeringKID == "kid-1" && answered.answeredAt == 1_050)
        #expect(answered.methods == ["hwk", "pin"])
        #expect(try storage.openSignInRequests(user: "alice", now: 1_060).map(\.id) == ["r2"])
        #expect(try storage.markSignInRequestIssued(id: "r1", expiringAfter: 1_000))
        #expect(try !storage.markSignInRequestIssued(id: "r1", expiringAfter: 1_000))
        #expect(try storage.signInRequest(id: "r1")?.status == .issued)
        // At its expiry a request can no longer be answered.
        #expect(
            try !storage.answerSignInRequest(id: "r2", status: .approved, answeringKID: "kid-1", methods: [], at: 1_300)
        )
        #expect(try storage.signInRequest(id: "r2")?.status == .pending)
    }

    static func collectsWithinTheGrace(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        for id in ["r1", "r2"] {
            #expect(try storage.insertSignInRequest(signInRequest(id), limits: Self.threeOpen, now: 1_000) == .inserted)
            // Approved in the request's last second.
            #expect(
                try storage.answerSignInRequest(
                    id: id, status: .approved, answeringKID: "kid-1", methods: [], at: 1_299))
        }
        // Both expire at 1_300: past the grace's end, the approval stays uncollected.
        let end = 1_300 + SignInRequests.answerGrace
        #expect(try !storage.markSignInRequestIssued(id: "r1", expiringAfter: SignInRequests.collectionCutoff(at: end)))
        #expect(try storage.signInRequest(id: "r1")?.status == .approved)
        #expect(try !storage.markSignInRequestIssued(id: "r1", expiringAfter: 1_300))
        #expect(try storage.signInRequest(id: "r1")?.status == .approved)
        // Its last second is still within it.
        #expect(
            try storage.markSignInRequestIssued(id: "r2", expiringAfter: SignInRequests.collectionCutoff(at: end - 1)))
        #expect(try storage.signInRequest(id: "r2")?.status == .issued)
    }

    static func listsCollectableApprovals(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        for (id, user) in [("r1", "alice"), ("r2", "alice"), ("r3", "alice"), ("b1", "bob")] {
            let request = signInRequest(id, user: user, createdAt: id == "r1" ? 1_001 : 1_000)
            #expect(try storage.insertSignInRequest(request, limits: Self.fourOpen, now: 1_001) == .inserted)
            if id != "r3" {
                #expect(
                    try storage.answerSignInRequest(
                        id: id, status: .approved, answeringKID: "kid-1", methods: [], at: 1_299))
            }
        }
        let approvals = { (kind: SignInRequestKind, time: Int64) throws -> [String] in
            try storage.approvedSignInRequests(
                user: "alice", kind: kind, expiringAfter: SignInRequests.collectionCutoff(at: time)
            ).map(\.id)
        }
        // All expire at 1_300; r3 is pending, b1 bob's.
        let end = 1_300 + SignInRequests.answerGrace
        #expect(try approvals(.backchannel, end - 1) == ["r2", "r1"])
        #expect(try approvals(.backchannel, end).isEmpty)
        #expect(try approvals(.account, end - 1).isEmpty)
        #expect(
            try storage.markSignInRequestIssued(id: "r2", expiringAfter: SignInRequests.collectionCutoff(at: 1_300)))
        #expect(try approvals(.backchannel, end - 1) == ["r1"])
    }

    static func pollsSignInRequests(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertSignInRequest(signInRequest("r1"), limits: Self.threeOpen, now: 1_000) == .inserted)
        #expect(try storage.pollSignInRequest(id: "nope", at: 1_000, slowDownStep: 5) == nil)
        let first = try #require(try storage.pollSignInRequest(id: "r1", at: 1_005, slowDownStep: 5))
        #expect(!first.tooEarly && first.request.lastPolledAt == nil && first.request.pollInterval == 5)
        let fast = try #require(try storage.pollSignInRequest(id: "r1", at: 1_009, slowDownStep: 5))
        #expect(fast.tooEarly && fast.request.lastPolledAt == 1_005 && fast.request.pollInterval == 5)
        // The interval is now 10: 9 seconds later is still too early, 10 is not.
        #expect(try storage.pollSignInRequest(id: "r1", at: 1_018, slowDownStep: 5)?.tooEarly == true)
        #expect(try storage.signInRequest(id: "r1")?.pollInterval == 15)
        #expect(try storage.pollSignInRequest(id: "r1", at: 1_033, slowDownStep: 5)?.tooEarly == false)
        #expect(try storage.signInRequest(id: "r1")?.pollInterval == 15)
        #expect(try storage.signInRequest(id: "r1")?.lastPolledAt == 1_033)
    }

    static func racesSignInRequests(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        // 24 requests for one user at once on two instances: exactly 3 are stored.
        let inserts = runConcurrently(24) { (index: Int) throws(StorageError) -> SignInRequestInsertion in
            try (index.isMultiple(of: 2) ? first : second).insertSignInRequest(
                signInRequest("race-\(index)"), limits: Self.threeOpen, now: 1_000)
        }
        let insertions = try inserts.map { try $0.get() }
        #expect(insertions.filter { $0 == .inserted }.count == 3)
        #expect(try first.openSignInRequests(user: "alice", now: 1_000).count == 3)
        let id = try #require(try second.openSignInRequests(user: "alice", now: 1_000).first?.id)
        // 24 answers at once: one wins.
        let answers = runConcurrently(24) { (index: Int) throws(StorageError) -> Bool in
            try (index.isMultiple(of: 2) ? first : second).answerSignInRequest(
                id: id, status: index.isMultiple(of: 3) ? .denied : .approved, answeringKID: "kid-\(index)",
                methods: [], at: 1_010)
        }
        #expect(try answers.map { try $0.get() }.filter { $0 }.count == 1)
        // 24 polls in the same second: only one finds the previous poll old enough.
        let polls = runConcurrently(24) { (index: Int) throws(StorageError) -> Bool in
            try (index.isMultiple(of: 2) ? first : second).pollSignInRequest(id: id, at: 1_020, slowDownStep: 5)?
                .tooEarly ?? true
        }
        #expect(try polls.map { try $0.get() }.filter { !$0 }.count == 1)
        // If it was approved, 24 collections at once: one gets it.
        if try first.signInRequest(id: id)?.status == .approved,
            let kid = try first.signInRequest(id: id)?.answeringKID
        {
            #expect(try first.insertDevice(device(kid, status: .active)))
            let collections = runConcurrently(24) { (index: Int) throws(StorageError) -> Bool in
                try (index.isMultiple(of: 2) ? first : second).markSignInRequestIssued(id: id, expiringAfter: 1_000)
            }
            #expect(try collections.map { try $0.get() }.filter { $0 }.count == 1)
        }
    }

    static func storesBrowserSessions(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let waitingHash = (0..<32).map { UInt8($0) }
        let waiting = BrowserSessionRecord(
            idHash: waitingHash, csrfToken: "csrf-1", user: "alice", signInRequestID: "r1", bindingCode: "42",
            createdAt: 1_000, expiresAt: 1_300)
        try storage.insertBrowserSession(waiting)
        #expect(try storage.browserSession(idHash: waitingHash) == waiting)
        #expect(try storage.browserSession(idHash: [UInt8](repeating: 9, count: 32)) == nil)
        var signedIn = waiting
        signedIn.idHash = (0..<32).map { UInt8(255 - $0) }
        signedIn.csrfToken = "csrf-2"
        signedIn.approvingKID = "kid-1"
        signedIn.methods = ["swk", "pin"]
        signedIn.signedInAt = 1_100
        signedIn.expiresAt = 2_000
        #expect(try storage.replaceBrowserSession(idHash: waitingHash, with: signedIn))
        #expect(try !storage.replaceBrowserSession(idHash: waitingHash, with: signedIn))
        #expect(try storage.browserSession(idHash: waitingHash) == nil)
        #expect(try storage.browserSession(idHash: signedIn.idHash) == signedIn)
        // Extended only while live: a session ended at 2_000 is not extended at 2_000.
        #expect(try !storage.extendBrowserSession(idHash: signedIn.idHash, until: 2_900, ifLiveAt: 2_000))
        #expect(try storage.extendBrowserSession(idHash: signedIn.idHash, until: 2_900, ifLiveAt: 1_999))
        #expect(try storage.browserSession(idHash: signedIn.idHash)?.expiresAt == 2_900)
        // Deleted as expired only when it is: an extended session stays.
        try storage.deleteBrowserSession(idHash: signedIn.idHash, expiredAt: 2_000)
        #expect(try storage.browserSession(idHash: signedIn.idHash)?.expiresAt == 2_900)

        var other = signedIn
        other.idHash = [UInt8](repeating: 7, count: 32)
        other.approvingKID = "kid-2"
        other.expiresAt = 1_500
        try storage.insertBrowserSession(other)
        #expect(try storage.purgeBrowserSessions(now: 1_500) == 0)
        #expect(try storage.purgeBrowserSessions(now: 1_501) == 1)
        try storage.insertBrowserSession(other)
        // Revoking the approving device ends its sessions, with its audit entry, in one go.
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        let revocation = AuditEvent(time: 1_600, action: .revoke, actor: "admin", user: "alice", subject: "kid-1")
        #expect(try storage.revokeOrDeny(kid: "kid-1", from: .active, to: .revoked, at: 1_600, audit: revocation))
        #expect(try storage.browserSession(idHash: signedIn.idHash) == nil)
        #expect(try storage.browserSession(idHash: other.idHash) != nil)
        #expect(try !storage.revokeOrDeny(kid: "kid-1", from: .active, to: .revoked, at: 1_601, audit: revocation))
        #expect(try storage.auditEvents(since: 0).filter { $0.subject == "kid-1" }.count == 1)
        #expect(try storage.device(kid: "kid-1")?.status == .revoked)
        try storage.deleteBrowserSession(idHash: other.idHash)
        #expect(try storage.browserSession(idHash: other.idHash) == nil)
    }

    static func collectsOnlyFromActiveDevices(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.insertDevice(device("kid-2", user: "bob", status: .active)))
        for id in ["r1", "r2", "r3", "r4"] {
            #expect(try storage.insertSignInRequest(signInRequest(id), limits: Self.fourOpen, now: 1_000) == .inserted)
        }
        #expect(
            try storage.answerSignInRequest(id: "r1", status: .approved, answeringKID: "kid-1", methods: [], at: 1_010))
        #expect(
            try storage.answerSignInRequest(id: "r2", status: .approved, answeringKID: "kid-1", methods: [], at: 1_010))
        #expect(
            try storage.answerSignInRequest(id: "r3", status: .approved, answeringKID: "kid-2", methods: [], at: 1_010))
        #expect(
            try storage.answerSignInRequest(id: "r4", status: .approved, answeringKID: "kid-9", methods: [], at: 1_010))
        #expect(try storage.markSignInRequestIssued(id: "r1", expiringAfter: 1_000))
        // Revoked since it approved: nothing to collect, and the request stays approved.
        #expect(try storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 1_020))
        #expect(try !storage.markSignInRequestIssued(id: "r2", expiringAfter: 1_000))
        #expect(try storage.signInRequest(id: "r2")?.status == .approved)
        // Another user's device (a key registered again under another name), or none at all.
        #expect(try !storage.markSignInRequestIssued(id: "r3", expiringAfter: 1_000))
        #expect(try !storage.markSignInRequestIssued(id: "r4", expiringAfter: 1_000))
    }

    /// Four open requests at most.
    static let fourOpen = SignInRequestLimits(maximumOpen: 4, maximumPerWindow: 1_000)

    static func deletesApprovalsWithTheUser(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        #expect(try storage.insertSignInRequest(signInRequest("r1"), limits: Self.fourOpen, now: 1_000) == .inserted)
        #expect(
            try storage.insertSignInRequest(signInRequest("b1", user: "bob"), limits: Self.fourOpen, now: 1_000)
                == .inserted)
        #expect(
            try storage.answerSignInRequest(id: "r1", status: .approved, answeringKID: "kid-1", methods: [], at: 1_010))
        let session = BrowserSessionRecord(
            idHash: [UInt8](repeating: 3, count: 32), csrfToken: "csrf", user: "alice", signInRequestID: "r1",
            bindingCode: "42", createdAt: 1_000, expiresAt: 1_300)
        var bobs = session
        bobs.idHash = [UInt8](repeating: 4, count: 32)
        bobs.user = "bob"
        try storage.insertBrowserSession(session)
        try storage.insertBrowserSession(bobs)
        let unredeemed = authorizationCode(5)
        let redeemed = authorizationCode(6)
        try storage.insertAuthorizationCode(unredeemed)
        try storage.insertAuthorizationCode(redeemed)
        _ = try storage.redeemAuthorizationCode(
            codeHash: redeemed.codeHash, at: 1_010, accessTokenJTI: "jti-6", accessTokenExpiresAt: 1_910)

        _ = try storage.deleteUser("alice", listingSSHKeysUntil: 0)
        #expect(try storage.signInRequest(id: "r1") == nil)
        #expect(try storage.browserSession(idHash: session.idHash) == nil)
        #expect(try storage.authorizationCode(codeHash: unredeemed.codeHash) == nil)
        // A redeemed code stays until it expires: a second use of it still revokes its token.
        #expect(try storage.authorizationCode(codeHash: redeemed.codeHash)?.redeemedAt == 1_010)
        // Other users keep theirs.
        #expect(try storage.signInRequest(id: "b1") != nil)
        #expect(try storage.browserSession(idHash: bobs.idHash) == bobs)
    }
}
