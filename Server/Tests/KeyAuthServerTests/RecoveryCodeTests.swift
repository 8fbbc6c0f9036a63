import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// Recovery codes through the responder: made by a device after a presence check, each enrolling
/// one device active at once, audited, announced to the user's other devices, and limited like
/// every registration. PBKDF2 runs with 1000 iterations here; the CLI test runs the default.
@Suite("Recovery codes")
struct RecoveryCodeTests {
    /// A server with cheap recovery-code hashing and room for the failures a test makes.
    static func api(_ environment: TestEnvironment, failureLimit: Int = 1000) throws -> TestAPI {
        try environment.directAPI {
            $0.recoveryCodeIterations = 1000
            $0.failureLimit = failureLimit
        }
    }

    /// `POST /v1/recovery-codes` by `key`'s device, with an assertion naming `user` and stating
    /// `methods`, or none.
    static func makeCodes(
        _ api: TestAPI, key: RSAPrivateKey, token: String, user: String = "alice", methods: [String] = ["swk", "pin"],
        withAssertion: Bool = true
    ) throws -> HTTPResponse {
        var body: [String: JSONValue] = [:]
        if withAssertion {
            body["assertion"] = .string(
                try api.assertion(
                    key, claims: ["recovery_codes": .string(user), "amr": .array(methods.map(JSONValue.string))]))
        }
        return try api.send(
            "POST", "/v1/recovery-codes",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
            body: Array(JSONValue.object(body).serialized().utf8))
    }

    /// The codes of a successful answer.
    static func codes(_ response: HTTPResponse) throws -> [String] {
        try #require(response.json?["codes"]?.arrayValue).compactMap(\.stringValue)
    }

    /// Registers `key` for `user` with `code` as its recovery code.
    static func recover(_ api: TestAPI, user: String = "alice", key: RSAPrivateKey, code: String) throws
        -> HTTPResponse
    {
        try api.registerBody(
            .object([
                "user": .string(user), "name": .string("new laptop"),
                "public_key": .string(key.publicKey.pemRepresentation), "proof": .string(try api.assertion(key)),
                "recovery_code": .string(code),
            ]))
    }

    /// Alice's laptop, active, and a set of codes it made; then the laptop is lost (revoked).
    static func aliceLostHerLaptop(_ api: TestAPI) throws -> (laptop: RSAPrivateKey, codes: [String]) {
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let codes = try Self.codes(try makeCodes(api, key: laptop, token: token))
        #expect(try api.authorized("DELETE", "/v1/devices/\(laptop.publicKey.fingerprint)", token: token).status == 204)
        return (laptop, codes)
    }

    @Test("a device makes 10 readable codes only with a fresh assertion after a presence check, and it is audited")
    func makingCodes() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)

        let tokenOnly = try Self.makeCodes(api, key: laptop, token: token, withAssertion: false)
        #expect(tokenOnly.status == 400 && tokenOnly.errorCode == "invalid_request")
        let keyOnly = try Self.makeCodes(api, key: laptop, token: token, methods: ["swk"])
        #expect(keyOnly.errorCode == "invalid_grant" && keyOnly.errorDescription?.contains("presence") == true)
        let otherUser = try Self.makeCodes(api, key: laptop, token: token, user: "bob")
        #expect(otherUser.errorCode == "invalid_grant")
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").isEmpty)
        #expect(try api.storage.unusedRecoveryCodes(user: "bob").isEmpty)

        let made = try Self.makeCodes(api, key: laptop, token: token)
        #expect(made.status == 200)
        #expect(made.headers["Cache-Control"] == "no-store")
        #expect(made.json?["user"] == .string("alice"))
        let codes = try Self.codes(made)
        #expect(codes.count == 10 && Set(codes).count == 10)
        // The enrollment codes' form: 20 symbols of Crockford's base32 in groups of four.
        #expect(codes.allSatisfy { EnrollmentCodes.canonical($0) == $0 && $0.count == 24 })
        let events = try AuditTrail(storage: api.storage, now: environment.clock.closure).events(since: 0)
        #expect(
            events.contains {
                $0.action == .recoveryCodes && $0.user == "alice"
                    && $0.actor == "device:\(laptop.publicKey.fingerprint)"
            })
        #expect(!events.contains { event in codes.contains { event.detail?.contains($0) == true } })
    }

    @Test("only salted PBKDF2 hashes are stored, never a code")
    func onlySlowHashesStored() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        let codes = try RecoveryCodes(storage: storage, iterations: 1000, now: environment.clock.closure)
            .issue(for: "alice", by: .administrator)
        let stored = try storage.unusedRecoveryCodes(user: "alice")
        #expect(stored.count == 10 && Set(stored.map(\.salt)).count == 1 && Set(stored.map(\.hash)).count == 10)
        #expect(RecoveryCodes.derivations(of: stored).count == 1)
        #expect(stored.allSatisfy { $0.iterations == 1000 && $0.hash.count == 32 })
        let first = try #require(stored.first)
        #expect(
            first.hash
                == (try CryptoPrimitives.pbkdf2SHA256(
                    password: Array(codes[0].utf8), salt: first.salt, iterations: 1000)))
        #expect(first.hash != (try CryptoPrimitives.sha256(Array(codes[0].utf8))))
        storage.close()
        let file = try #require(FileManagerLite.contents(of: environment.databasePath))
        for code in codes {
            #expect(!file.containsSubsequence(Array(code.utf8)))
            #expect(!file.containsSubsequence(Array(code.replacingOccurrences(of: "-", with: "").utf8)))
        }
    }

    @Test("a set asked for by a device revoked while the codes were hashed is refused and not stored")
    func revokedWhileHashing() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        defer { storage.close() }
        let codes = RecoveryCodes(storage: storage, iterations: 1000, now: environment.clock.closure)
        let phone = DeviceRecord(
            kid: "kid-phone", user: "alice", name: "phone", publicKeyPEM: "-----BEGIN PUBLIC KEY-----\n",
            status: .active, createdAt: 1)
        #expect(try storage.insertDevice(phone))
        let kept = try codes.issue(for: "alice", by: .device(kid: phone.kid), whileActive: phone.kid)
        #expect(kept.count == 10)
        // The request was authenticated with the device active; the revocation committed before
        // the new set was stored.
        #expect(try storage.updateStatus(kid: phone.kid, from: .active, to: .revoked, at: 2))
        #expect(throws: ServiceError(.accessDenied, "the device is no longer active")) {
            try codes.issue(for: "alice", by: .device(kid: phone.kid), whileActive: phone.kid)
        }
        // The set from before the revocation stays and still works.
        #expect(try storage.unusedRecoveryCodes(user: "alice").count == 10)
        #expect(try codes.consume(kept[0], user: "alice"))
    }

    @Test("a typed code costs one derivation per salt: a set from before, with a salt per code, still works")
    func saltPerCodeSets() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        defer { storage.close() }
        let codes = ["AAAA-BBBB-CCCC-DDDD-EEE0", "AAAA-BBBB-CCCC-DDDD-EEE1", "AAAA-BBBB-CCCC-DDDD-EEE2"]
        let records = try codes.enumerated().map { index, code in
            let salt = [UInt8](repeating: UInt8(index + 1), count: 16)
            return RecoveryCodeRecord(
                user: "alice", salt: salt,
                hash: try CryptoPrimitives.pbkdf2SHA256(password: Array(code.utf8), salt: salt, iterations: 500),
                iterations: 500, createdAt: environment.clock.now)
        }
        try storage.replaceRecoveryCodes(user: "alice", with: records)
        let stored = try storage.unusedRecoveryCodes(user: "alice")
        #expect(RecoveryCodes.derivations(of: stored).map(\.codes.count) == [1, 1, 1])
        var damaged = stored
        damaged[0].iterations = 0
        #expect(RecoveryCodes.derivations(of: damaged).count == 2)

        let recovery = RecoveryCodes(storage: storage, iterations: 1000, now: environment.clock.closure)
        #expect(try recovery.consume("aaaabbbbccccddddeee2", user: "alice"))
        #expect(try !recovery.consume("AAAA-BBBB-CCCC-DDDD-EEE2", user: "alice"))
        #expect(try !recovery.consume("AAAA-BBBB-CCCC-DDDD-EEE3", user: "alice"))
        #expect(try !recovery.consume("AAAA-BBBB-CCCC-DDDD-EEE0", user: "bob"))
        #expect(try recovery.remaining(for: "alice") == 2)
    }

    @Test("PBKDF2-HMAC-SHA-256 matches RFC 7914's test vector")
    func pbkdf2Vector() throws {
        // RFC 7914 section 11: P = "passwd", S = "salt", c = 1, dkLen = 64.
        let derived = try CryptoPrimitives.pbkdf2SHA256(
            password: Array("passwd".utf8), salt: Array("salt".utf8), iterations: 1, length: 64)
        #expect(
            Hex.encode(derived)
                == "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
                + "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783")
    }

    @Test("a code enrols a new device once, active at once, typed in any case and grouping; others are refused")
    func consumingCodes() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (_, codes) = try Self.aliceLostHerLaptop(api)

        // Without a code, nobody is left to approve: refused.
        let none = try api.register(user: "alice", key: try ServerTestKeys.key("alice-2"))
        #expect(none.errorCode == "access_denied")
        let wrong = try Self.recover(api, key: try ServerTestKeys.key("alice-2"), code: "AAAA-BBBB-CCCC-DDDD-EEEE")
        #expect(wrong.status == 403 && wrong.errorCode == "access_denied")
        #expect(wrong.errorDescription?.contains("recovery code") == true)
        let notACode = try Self.recover(api, key: try ServerTestKeys.key("alice-2"), code: "hello")
        #expect(notACode.errorCode == "access_denied")
        // Another user cannot use alice's code, which stays usable by her.
        let stolen = try Self.recover(api, user: "bob", key: try ServerTestKeys.key("bob-1"), code: codes[3])
        #expect(stolen.errorCode == "access_denied")

        let typed = codes[3].lowercased().replacingOccurrences(of: "-", with: " ")
        let phone = try ServerTestKeys.key("alice-2")
        let recovered = try Self.recover(api, key: phone, code: typed)
        #expect(recovered.status == 201, "\(recovered.text)")
        #expect(recovered.json?["status"] == .string("active"))
        #expect(try api.login(phone).status == 200)
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 9)

        let again = try Self.recover(api, key: try ServerTestKeys.key("alice-3"), code: codes[3])
        #expect(again.status == 403 && again.errorCode == "access_denied")
        let both = try api.registerBody(
            .object([
                "user": "alice", "name": "x",
                "public_key": .string(try ServerTestKeys.key("alice-3").publicKey.pemRepresentation),
                "proof": .string(try api.assertion(try ServerTestKeys.key("alice-3"))),
                "recovery_code": .string(codes[4]),
                "enrollment_code": "AAAA-BBBB-CCCC-DDDD-EEEE",
            ]))
        #expect(both.status == 400 && both.errorCode == "invalid_request")

        let events = try AuditTrail(storage: api.storage, now: environment.clock.closure).events(since: 0)
        let used = try #require(events.first { $0.action == .useRecoveryCode })
        #expect(used.user == "alice" && used.subject == phone.publicKey.fingerprint)
        #expect(used.actor == "device:\(phone.publicKey.fingerprint)")
        #expect(used.detail == "new laptop, from 192.0.2.1, 9 codes left")
        #expect(events.filter { $0.action == .useRecoveryCode }.count == 1)
    }

    @Test("a new set replaces the old one: its unused codes stop working")
    func newSetReplacesOld() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let old = try Self.codes(try Self.makeCodes(api, key: laptop, token: token))
        let new = try Self.codes(try Self.makeCodes(api, key: laptop, token: token))
        #expect(Set(old).isDisjoint(with: new))
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 10)
        let refused = try Self.recover(api, key: try ServerTestKeys.key("alice-2"), code: old[0])
        #expect(refused.errorCode == "access_denied")
        #expect(try Self.recover(api, key: try ServerTestKeys.key("alice-2"), code: new[0]).status == 201)
    }

    @Test("wrong codes count against the address's failure limit, which then refuses even a right one (429)")
    func wrongCodesAreRateLimited() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment, failureLimit: 3)
        let (_, codes) = try Self.aliceLostHerLaptop(api)
        for index in 0..<3 {
            let key = try ServerTestKeys.key("alice-\(index + 2)")
            #expect(try Self.recover(api, key: key, code: "AAAA-BBBB-CCCC-DDDD-EEE\(index)").status == 403)
        }
        let limited = try Self.recover(api, key: try ServerTestKeys.key("alice-9"), code: codes[0])
        #expect(limited.status == 429 && limited.errorCode == "slow_down")
        #expect(limited.headers["Retry-After"] != nil)
        // Nothing was used up by the refused attempt.
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 10)
    }

    /// Alice's laptop, active, makes recovery codes; a thief enrols a device with one of them.
    private static func thiefUsedACode(_ api: TestAPI) throws -> (
        laptop: RSAPrivateKey, token: String, thief: RSAPrivateKey
    ) {
        let (laptop, token, codes) = try aliceWithCodes(api)
        let thief = try ServerTestKeys.key("alice-2")
        #expect(try Self.recover(api, key: thief, code: codes[0]).status == 201)
        return (laptop, token, thief)
    }

    /// Alice's laptop, active, its token, and a set of codes it made.
    private static func aliceWithCodes(_ api: TestAPI) throws -> (
        laptop: RSAPrivateKey, token: String, codes: [String]
    ) {
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        return (laptop, token, try codes(try makeCodes(api, key: laptop, token: token)))
    }

    @Test("a device a recovery code enrolled is not stored, and its code not used, when its notice cannot be")
    func failedNoticeStoresNothing() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let thief = try Self.recoverAfterFailedWrite(
            api, insertingInto: "sign_in_requests", when: "NEW.kind = 'recovery'")
        // The client's retry enrolled it, announced.
        let open = try api.storage.openSignInRequests(user: "alice", now: environment.clock.now)
        #expect(open.contains { $0.kind == .recovery && $0.subject == thief })
    }

    @Test("a device a recovery code enrolled is not stored, and its code not used, when its audit entry cannot be")
    func failedAuditStoresNothing() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let thief = try Self.recoverAfterFailedWrite(
            api, insertingInto: "audit_events", when: "NEW.action = 'use-recovery-code'")
        // The client's retry enrolled it, audited with the codes left.
        let used = try api.storage.auditEvents(since: 0).filter { $0.action == .useRecoveryCode }
        #expect(used.map(\.subject) == [thief])
        #expect(used.first?.detail?.hasSuffix("9 codes left") == true, "\(used)")
    }

    /// Gives alice codes, makes the first recovery with one fail on a write into `table` (a
    /// trigger refusing rows `when`, as a full disk would), and checks that the device was not
    /// stored and no code was used. Then recovers again with the same code, as the client's
    /// retry does.
    ///
    /// - Returns: the key id of the device the second recovery enrolled.
    private static func recoverAfterFailedWrite(
        _ api: TestAPI, insertingInto table: String, when condition: String
    ) throws -> String {
        let (_, _, codes) = try aliceWithCodes(api)
        try api.executeSQL(
            "CREATE TRIGGER refuse_write BEFORE INSERT ON \(table) WHEN \(condition) "
                + "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
        let thief = try ServerTestKeys.key("alice-2")
        #expect(try recover(api, key: thief, code: codes[0]).status >= 500)
        // One transaction: never a device active without its notice or audit entry, even for a
        // moment.
        #expect(try api.storage.device(kid: thief.publicKey.fingerprint) == nil)
        try api.executeSQL("DROP TRIGGER refuse_write")
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 10)
        #expect(try recover(api, key: thief, code: codes[0]).status == 201)
        return thief.publicKey.fingerprint
    }

    @Test("a new set whose audit entry cannot be written is not stored: the codes the user printed still work")
    func failedSetAuditKeepsOldCodes() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (laptop, token, codes) = try Self.aliceWithCodes(api)
        try api.executeSQL(
            "CREATE TRIGGER refuse_write BEFORE INSERT ON audit_events WHEN NEW.action = 'recovery-codes' "
                + "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
        #expect(try Self.makeCodes(api, key: laptop, token: token).status >= 500)
        try api.executeSQL("DROP TRIGGER refuse_write")
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 10)
        #expect(try Self.recover(api, key: try ServerTestKeys.key("alice-2"), code: codes[0]).status == 201)
    }

    @Test("denying a notice revokes the device first: a failure after leaves the notice open, to deny again")
    func denialRevokesFirst() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (_, token, thief) = try Self.thiefUsedACode(api)
        let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        let id = try #require(listed.first { $0["kind"] == .string("recovery") }?["id"]?.stringValue)
        // The notice's own update fails, after the revocation.
        try api.executeSQL(
            "CREATE TRIGGER no_answer BEFORE UPDATE ON sign_in_requests BEGIN SELECT RAISE(ABORT, 'the disk is full'); END"
        )
        #expect(try api.answer(id, decision: "deny", assertion: nil, token: token).status >= 500)
        try api.executeSQL("DROP TRIGGER no_answer")
        #expect(try api.storage.device(kid: thief.publicKey.fingerprint)?.status == .revoked)
        #expect(try api.storage.signInRequest(id: id)?.status == .pending)
        #expect(try api.answer(id, decision: "deny", assertion: nil, token: token).status == 200)
        #expect(try api.storage.signInRequest(id: id)?.status == .denied)
    }

    @Test(
        "while its notice is open, a device a code enrolled makes no codes, and approves and denies no device or codes"
    )
    func announcedDeviceWaits() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (laptop, token, thief) = try Self.thiefUsedACode(api)
        let thiefToken = try api.accessToken(thief)
        let codes = try Self.makeCodes(api, key: thief, token: thiefToken)
        #expect(codes.status == 403 && codes.errorCode == "access_denied")
        #expect(codes.text.contains("enrolled with a recovery code"), "\(codes.text)")
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 9, "alice's own codes still work")
        let accomplice = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: accomplice, name: "accomplice").status == 202)
        let approval = try api.approveDevice(accomplice.publicKey.fingerprint, approver: thief, token: thiefToken)
        #expect(approval.status == 403 && approval.errorCode == "access_denied")
        #expect(try api.storage.device(kid: accomplice.publicKey.fingerprint)?.status == .pending)
        // The account page's requests, which make a device or codes, are refused at the code step
        // and at the answer, though the page's session that asked is signed in by alice's laptop.
        let now = environment.clock.now
        let session = BrowserSessionRecord(
            idHash: [UInt8](repeating: 7, count: 32), csrfToken: "csrf", user: "alice", signInRequestID: nil,
            bindingCode: "42", approvingKID: laptop.publicKey.fingerprint, methods: ["swk", "pin"], createdAt: now,
            expiresAt: now + 3600, signedInAt: now)
        try api.storage.insertBrowserSession(session)
        for (index, kind) in [SignInRequestKind.device, .recoveryCodes].enumerated() {
            let request = SignInRequestRecord(
                id: Base64URL.encode([UInt8](repeating: UInt8(index + 1), count: 32)), kind: kind, clientID: nil,
                user: "alice", bindingMessage: "42",
                scope: nil, requestedFrom: "192.0.2.9", createdAt: now, expiresAt: now + 300,
                subject: kind == .device ? accomplice.publicKey.fingerprint : nil,
                requestedBy: Base64URL.encode(session.idHash))
            guard
                case .inserted = try api.storage.insertSignInRequest(
                    request, limits: StorageContract.threeOpen, now: now)
            else {
                Issue.record("the \(kind) request was not stored")
                continue
            }
            let code = try api.checkCode(request.id, code: "42", token: thiefToken)
            #expect(code.status == 403 && code.errorCode == "access_denied", "\(kind): \(code.text)")
            let answer = try api.answer(
                request.id, decision: "approve", assertion: try api.approvalAssertion(thief, id: request.id),
                token: thiefToken)
            #expect(answer.status == 403 && answer.errorCode == "access_denied", "\(kind): \(answer.text)")
            // Nor denied by it: that would keep alice from replacing the codes it stole.
            let denial = try api.answer(request.id, decision: "deny", assertion: nil, token: thiefToken)
            #expect(denial.status == 403 && denial.errorCode == "access_denied", "\(kind): \(denial.text)")
            #expect(denial.text.contains("cannot deny a request to add a device or make recovery codes"))
            #expect(try api.storage.signInRequest(id: request.id)?.status == .pending, "\(kind)")
        }
        // The user's own devices are not held back.
        let own = try api.approveDevice(accomplice.publicKey.fingerprint, approver: laptop, token: token)
        #expect(own.status == 200, "\(own.text)")

        // Up to the notice's last second (the rule skips its read only for devices older than a
        // notice can live), and not after: once the notice ended undenied, the device is like
        // any other.
        environment.clock.advance(by: 86_399)
        let last = try Self.makeCodes(api, key: thief, token: try api.accessToken(thief))
        #expect(last.status == 403 && last.errorCode == "access_denied", "\(last.text)")
        environment.clock.advance(by: 1)
        let later = try Self.makeCodes(api, key: thief, token: try api.accessToken(thief))
        #expect(later.status == 200, "\(later.text)")
    }

    @Test("while its notice is open, a device a code enrolled revokes no other device and gets no SSH certificate")
    func announcedDeviceSilencesNobody() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let caFile = environment.directory.path + "/ssh-ca.key"
        try SSHCertificateAuthority.generate(.ed25519).write(to: caFile)
        let api = try environment.directAPI {
            $0.recoveryCodeIterations = 1000
            $0.failureLimit = 1000
            $0.sshCAKeyFile = caFile
        }
        let (laptop, token, codes) = try Self.aliceWithCodes(api)
        let thief = try ServerTestKeys.key("alice-2")
        #expect(try Self.recover(api, key: thief, code: codes[0]).status == 201)
        let thiefToken = try api.accessToken(thief)
        let pending = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: pending, name: "phone").status == 202)
        // Revoking the laptop would leave nobody to deny the notice; denying the phone, a
        // decision the user did not make.
        for kid in [laptop.publicKey.fingerprint, pending.publicKey.fingerprint] {
            let refused = try api.authorized("DELETE", "/v1/devices/\(kid)", token: thiefToken)
            #expect(refused.status == 403 && refused.errorCode == "access_denied", "\(refused.text)")
            #expect(refused.text.contains("revoke or deny another device"), "\(refused.text)")
        }
        #expect(try api.storage.device(kid: laptop.publicKey.fingerprint)?.status == .active)
        #expect(try api.storage.device(kid: pending.publicKey.fingerprint)?.status == .pending)
        let certificate = try api.authorized("POST", "/v1/ssh/certificates", token: thiefToken)
        #expect(certificate.status == 403 && certificate.errorCode == "access_denied", "\(certificate.text)")
        #expect(try api.storage.auditEvents(since: 0).filter { $0.action == .issueSSHCertificate }.isEmpty)
        // Nor by denying the notice of another device a code enrolled.
        let other = try ServerTestKeys.key("alice-4")
        #expect(try Self.recover(api, key: other, code: codes[1]).status == 201)
        let open = try api.storage.openSignInRequests(user: "alice", now: environment.clock.now)
        let othersNotice = try #require(
            open.first { $0.kind == .recovery && $0.subject == other.publicKey.fingerprint })
        let denied = try api.answer(othersNotice.id, decision: "deny", assertion: nil, token: thiefToken)
        #expect(denied.status == 403 && denied.errorCode == "access_denied", "\(denied.text)")
        #expect(try api.storage.device(kid: other.publicKey.fingerprint)?.status == .active)
        // The user's own device is not held back, and the enrolled device may still leave.
        #expect(try api.authorized("POST", "/v1/ssh/certificates", token: token).status == 201)
        let own = try api.authorized("DELETE", "/v1/devices/\(thief.publicKey.fingerprint)", token: thiefToken)
        #expect(own.status == 204, "\(own.text)")
    }

    @Test("the user's other devices get a notice that cannot be approved, and denying it revokes the new device")
    func otherDevicesAreTold() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (laptop, token, thief) = try Self.thiefUsedACode(api)
        let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        let notice = try #require(listed.first { $0["kind"] == .string("recovery") })
        let name = try #require(notice["client_name"]?.stringValue)
        #expect(
            name.contains(
                "recovery code enrolled the new device \"new laptop\" (\(thief.publicKey.fingerprint.prefix(8)))"))
        #expect(name.contains("from 192.0.2.1"))
        let id = try #require(notice["id"]?.stringValue)
        // It lives a day, not the five minutes of a sign-in.
        let record = try #require(try api.storage.signInRequest(id: id))
        #expect(record.expiresAt - record.createdAt == 86_400)

        let approve = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        #expect(approve.status == 400 && approve.errorCode == "invalid_request")
        #expect(try api.answer(id, decision: "deny", assertion: nil, token: token).status == 200)
        #expect(try api.storage.device(kid: thief.publicKey.fingerprint)?.status == .revoked)
        #expect(try api.login(thief).status != 200)
        let events = try AuditTrail(storage: api.storage, now: environment.clock.closure).events(since: 0)
        #expect(
            events.contains {
                $0.action == .revoke && $0.subject == thief.publicKey.fingerprint
                    && $0.actor == "device:\(laptop.publicKey.fingerprint)"
            })
    }

    @Test("every enrolment by recovery code is announced: its enroller cannot hide the next one behind denied notices")
    func everyEnrolmentIsAnnounced() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let codes = try Self.codes(try Self.makeCodes(api, key: laptop, token: token))
        let thieves = try (2...5).map { try ServerTestKeys.key("alice-\($0)") }
        for (index, thief) in thieves.enumerated() {
            #expect(try Self.recover(api, key: thief, code: codes[index]).status == 201)
        }
        func notices() throws -> [(id: String, name: String)] {
            let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
            return listed.filter { $0["kind"] == .string("recovery") }.compactMap { notice in
                guard let id = notice["id"]?.stringValue, let name = notice["client_name"]?.stringValue else {
                    return nil
                }
                return (id, name)
            }
        }
        let all = try notices()
        #expect(all.count == thieves.count)
        // The last device enrolled cannot deny the notices of the others either (which would
        // revoke its own accomplices to make room): while its own notice is open, it revokes
        // no other device, by a notice or otherwise.
        let last = try #require(thieves.last)
        let lastName = String(last.publicKey.fingerprint.prefix(8))
        let lastToken = try api.accessToken(last)
        for notice in all where !notice.name.contains(lastName) {
            let denied = try api.answer(notice.id, decision: "deny", assertion: nil, token: lastToken)
            #expect(denied.status == 403 && denied.errorCode == "access_denied", "\(denied.text)")
        }
        #expect(try notices().count == thieves.count)
        // The user's laptop denies them all.
        for notice in all {
            #expect(try api.answer(notice.id, decision: "deny", assertion: nil, token: token).status == 200)
        }
        #expect(try notices().isEmpty)
        #expect(try thieves.allSatisfy { try api.storage.device(kid: $0.publicKey.fingerprint)?.status == .revoked })
    }

    @Test("the device a notice names cannot dismiss it with wrong codes: the notice has no code")
    func noticeHasNoCode() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (_, token, thief) = try Self.thiefUsedACode(api)
        let thiefToken = try api.accessToken(thief)
        let listed = try #require(try api.openRequests(token: thiefToken).json?["requests"]?.arrayValue)
        let id = try #require(listed.first { $0["kind"] == .string("recovery") }?["id"]?.stringValue)

        // Three wrong codes deny a sign-in request; here every one is refused uncounted.
        for _ in 0..<4 {
            let typed = try api.checkCode(id, code: "00", token: thiefToken)
            #expect(typed.status == 400 && typed.errorCode == "invalid_request")
        }
        let record = try #require(try api.storage.signInRequest(id: id))
        #expect(record.status == .pending && record.codeAttempts == 0)
        let stillListed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        #expect(stillListed.contains { $0["id"] == .string(id) })
        // Denying it is still the way to be rid of it, and that revokes the device it names.
        #expect(try api.answer(id, decision: "deny", assertion: nil, token: thiefToken).status == 200)
        #expect(try api.storage.device(kid: thief.publicKey.fingerprint)?.status == .revoked)
    }

    @Test("with no device left, nobody is told: the audit trail is the record")
    func noDeviceNoNotice() throws {
        let environment = TestEnvironment()
        let api = try Self.api(environment)
        let (_, codes) = try Self.aliceLostHerLaptop(api)
        let phone = try ServerTestKeys.key("alice-2")
        #expect(try Self.recover(api, key: phone, code: codes[0]).status == 201)
        let token = try api.accessToken(phone)
        let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        #expect(!listed.contains { $0["kind"] == .string("recovery") })
    }
}
