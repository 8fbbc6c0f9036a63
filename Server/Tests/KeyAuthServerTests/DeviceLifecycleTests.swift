import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

@Suite("Device states: approval, denial, expiry, revocation", .timeLimit(.minutes(10)))
struct DeviceLifecycleTests {
    @Test("a pending device gets authorization_pending until an active device of the user approves it")
    func approvalFlow() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let phone = try ServerTestKeys.key("alice-2")
        let token = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.register(user: "alice", key: phone, name: "phone").status == 202)

        let pending = try api.login(phone)
        #expect(pending.status == 400)
        #expect(pending.errorCode == "authorization_pending")
        // Polling is not a failure: many polls never trigger the rate limit.
        for _ in 0..<15 { #expect(try api.login(phone).errorCode == "authorization_pending") }

        let approved = try api.approveDevice(phone.publicKey.fingerprint, approver: laptop, token: token)
        #expect(approved.status == 200)
        #expect(approved.json?["status"]?.stringValue == "active")
        #expect(approved.json?["kid"]?.stringValue == phone.publicKey.fingerprint)
        #expect(try api.login(phone).status == 200)
        #expect(try api.storage.device(kid: phone.publicKey.fingerprint)?.approvedAt == environment.clock.now)
    }

    @Test(
        "a copied access token approves no device: approval needs the approving device's fresh assertion with presence, naming the device"
    )
    func tokenAloneApprovesNothing() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer()
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        // An attacker with a copy of the Bearer token registers their own key for alice...
        let attacker = try ServerTestKeys.key("attacker")
        #expect(try api.register(user: "alice", key: attacker, name: "alice-laptop").status == 202)
        let kid = attacker.publicKey.fingerprint
        // ...and cannot approve it with the token.
        let tokenOnly = try api.approveDevice(kid, approver: nil, token: token)
        #expect(tokenOnly.status == 400 && tokenOnly.errorCode == "invalid_request", "\(tokenOnly.text)")
        // Nor with an assertion of the attacker's own key, one naming another device, one without
        // a presence check, or a replayed one.
        #expect(try api.approveDevice(kid, approver: attacker, token: token).errorCode == "invalid_grant")
        let other = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: other).status == 202)
        let forOther = try api.assertion(
            laptop, claims: ["approve_kid": .string(other.publicKey.fingerprint), "amr": .array(["swk", "pin"])])
        let misnamed = try api.send(
            "POST", "/v1/devices/\(kid)/approve",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
            body: Array(JSONValue.object(["assertion": .string(forOther)]).serialized().utf8))
        #expect(misnamed.errorCode == "invalid_grant")
        #expect(
            try api.approveDevice(kid, approver: laptop, token: token, methods: ["swk"]).errorCode == "invalid_grant")
        #expect(try api.storage.device(kid: kid)?.status == .pending)
        // The user's own device, after its PIN, approves.
        let approved = try api.approveDevice(other.publicKey.fingerprint, approver: laptop, token: token)
        #expect(approved.status == 200, "\(approved.text)")
        #expect(try api.storage.device(kid: kid)?.status == .pending)
    }

    @Test("a pending device can approve nothing: its assertion gets no token")
    func pendingCannotApprove() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let phone = try ServerTestKeys.key("alice-2")
        let tablet = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: phone).status == 202)
        #expect(try api.register(user: "alice", key: tablet).status == 202)
        #expect(throws: TestFailure.self) { try api.accessToken(phone) }
        let forged = try api.authorized(
            "POST", "/v1/devices/\(tablet.publicKey.fingerprint)/approve", token: "not-a-token")
        #expect(forged.status == 401)
        #expect(forged.errorCode == "invalid_token")
    }

    @Test("a denied device gets access_denied at login")
    func denial() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let phone = try ServerTestKeys.key("alice-2")
        let token = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.register(user: "alice", key: phone).status == 202)
        #expect(try api.authorized("DELETE", "/v1/devices/\(phone.publicKey.fingerprint)", token: token).status == 204)
        let response = try api.login(phone)
        #expect(response.status == 400)
        #expect(response.errorCode == "access_denied")
        #expect(try api.storage.device(kid: phone.publicKey.fingerprint)?.status == .denied)
        let approve = try api.approveDevice(phone.publicKey.fingerprint, approver: laptop, token: token)
        #expect(approve.status == 400)
        #expect(approve.errorCode == "invalid_request")
    }

    @Test("a pending device expires after 10 minutes: expired_token at login, approval and re-registration")
    func pendingExpiry() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let phone = try ServerTestKeys.key("alice-2")
        _ = try api.activeDevice(user: "alice", key: laptop)
        environment.clock.advance(by: 1)
        #expect(try api.register(user: "alice", key: phone).status == 202)
        environment.clock.advance(by: 599)
        #expect(try api.login(phone).errorCode == "authorization_pending")
        environment.clock.advance(by: 1)
        let expired = try api.login(phone)
        #expect(expired.status == 400)
        #expect(expired.errorCode == "expired_token")
        let token = try api.accessToken(laptop)
        let approve = try api.approveDevice(phone.publicKey.fingerprint, approver: laptop, token: token)
        #expect(approve.status == 400)
        #expect(approve.errorCode == "expired_token")
        #expect(try api.register(user: "alice", key: phone).errorCode == "expired_token")
        let list = try api.authorized("GET", "/v1/devices", token: token)
        let statuses = list.json?["devices"]?.arrayValue?.compactMap { $0["status"]?.stringValue }
        #expect(statuses == ["active", "expired"])
    }

    @Test("revocation refuses even an assertion signed before it, and ends the device's access tokens")
    func revocation() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let phone = try ServerTestKeys.key("alice-2")
        let laptopToken = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.register(user: "alice", key: phone).status == 202)
        #expect(
            try api.approveDevice(phone.publicKey.fingerprint, approver: laptop, token: laptopToken).status
                == 200)
        let phoneToken = try api.accessToken(phone)
        let preSigned = try api.assertion(phone, lifetime: 300)

        let revoke = try api.authorized("DELETE", "/v1/devices/\(phone.publicKey.fingerprint)", token: laptopToken)
        #expect(revoke.status == 204)
        #expect(revoke.body.isEmpty)
        let refused = try api.login(assertion: preSigned)
        #expect(refused.status == 400)
        #expect(refused.errorCode == "invalid_grant")
        #expect(refused.errorDescription == DeviceAssertionVerifier.uniformFailure)

        let withOldToken = try api.authorized("GET", "/v1/devices", token: phoneToken)
        #expect(withOldToken.status == 401)
        #expect(withOldToken.errorCode == "invalid_token")
        #expect(withOldToken.headers["WWW-Authenticate"] == "Bearer error=\"invalid_token\"")
        // Revoking again is idempotent; approving a revoked device is refused.
        #expect(
            try api.authorized("DELETE", "/v1/devices/\(phone.publicKey.fingerprint)", token: laptopToken).status == 204
        )
        #expect(try api.storage.device(kid: phone.publicKey.fingerprint)?.status == .revoked)
        #expect(try api.register(user: "alice", key: phone).json?["status"]?.stringValue == "revoked")
    }

    @Test("a revocation whose audit entry cannot be written changes nothing; the retry revokes and audits once")
    func revocationIsAuditedOrUndone() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let phone = try ServerTestKeys.key("alice-2")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let kid = phone.publicKey.fingerprint
        #expect(try api.register(user: "alice", key: phone, name: "phone").status == 202)
        #expect(try api.approveDevice(kid, approver: laptop, token: token).status == 200)
        try api.executeSQL(
            "CREATE TRIGGER no_audit BEFORE INSERT ON audit_events WHEN NEW.action = 'revoke' "
                + "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
        #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: token).status >= 500)
        // One transaction: not revoked without its record, so the retry below is a real revocation.
        #expect(try api.storage.device(kid: kid)?.status == .active)
        try api.executeSQL("DROP TRIGGER no_audit")
        #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: token).status == 204)
        #expect(try api.storage.device(kid: kid)?.status == .revoked)
        #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: token).status == 204)
        let revocations = try api.storage.auditEvents(since: 0).filter { $0.action == .revoke }
        #expect(revocations.map(\.subject) == [kid])
    }

    @Test("a device can revoke itself, after which its token no longer works")
    func selfRevocation() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.authorized("DELETE", "/v1/devices/\(laptop.publicKey.fingerprint)", token: token).status == 204)
        #expect(try api.authorized("GET", "/v1/devices", token: token).status == 401)
        #expect(try api.login(laptop).errorCode == "invalid_grant")
    }

    @Test("devices of another user can be neither approved nor revoked, and look unknown (404 not_found)")
    func otherUsersDevices() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let alice = try ServerTestKeys.key("alice-1")
        let alicePhone = try ServerTestKeys.key("alice-2")
        let bob = try ServerTestKeys.key("bob-1")
        _ = try api.activeDevice(user: "alice", key: alice)
        #expect(try api.register(user: "alice", key: alicePhone).status == 202)
        let bobToken = try api.activeDevice(user: "bob", key: bob)
        for (method, path) in [
            ("POST", "/v1/devices/\(alicePhone.publicKey.fingerprint)/approve"),
            ("DELETE", "/v1/devices/\(alice.publicKey.fingerprint)"),
        ] {
            let response = try api.authorized(method, path, token: bobToken)
            #expect(response.status == 404)
            #expect(response.errorCode == "not_found")
            #expect(response.errorDescription == "no such device")
        }
        #expect(try api.storage.device(kid: alicePhone.publicKey.fingerprint)?.status == .pending)
        #expect(try api.storage.device(kid: alice.publicKey.fingerprint)?.status == .active)
        let list = try api.authorized("GET", "/v1/devices", token: bobToken)
        #expect(list.json?["devices"]?.arrayValue?.count == 1)
    }

    @Test("an unknown device gives 404 not_found")
    func unknownDevice() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let unknown = try ServerTestKeys.key("stranger").publicKey.fingerprint
        for (method, path) in [
            ("DELETE", "/v1/devices/\(unknown)"), ("POST", "/v1/devices/\(unknown)/approve"),
            ("DELETE", "/v1/devices/short"),
        ] {
            let response = try api.authorized(method, path, token: token)
            #expect(response.status == 404)
            #expect(response.errorCode == "not_found")
        }
    }

    @Test("the device list shows kid, name, status and RFC 3339 times")
    func deviceList() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        environment.clock.advance(by: 1)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-2"), name: "phone").status == 202)
        let response = try api.authorized("GET", "/v1/devices", token: token)
        #expect(response.status == 200)
        let devices = try #require(response.json?["devices"]?.arrayValue)
        #expect(devices.count == 2)
        #expect(devices[0]["kid"]?.stringValue == laptop.publicKey.fingerprint)
        #expect(devices[0]["status"]?.stringValue == "active")
        #expect(devices[0]["created_at"]?.stringValue == "2027-01-15T08:00:00Z")
        #expect(devices[0]["last_login_at"]?.stringValue == "2027-01-15T08:00:00Z")
        #expect(devices[1]["name"]?.stringValue == "phone")
        #expect(devices[1]["status"]?.stringValue == "pending")
        #expect(devices[1]["last_login_at"] == .null)
    }

    @Test(
        "Bearer tokens are checked strictly: missing, malformed, foreign, expired or wrong type give 401 invalid_token")
    func bearerChecks() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let stranger = try ServerTestKeys.key("stranger")
        var claims = JWTClaims()
        claims.set("iss", string: api.issuer)
        claims.set("sub", string: "alice")
        try claims.setJSON("cnf", json: "{\"jkt\":\"\(laptop.publicKey.fingerprint)\"}")
        let foreign = try JWTBuilder(key: stranger, audience: api.issuer, lifetime: 900, clock: environment.clock.clock)
            .sign(claims: claims, type: "at+jwt")
        let assertionAsToken = try api.assertion(laptop)
        let cases: [HTTPHeaders] = [
            [:], ["Authorization": "Basic YWxpY2U6cHc="], ["Authorization": "Bearer"],
            ["Authorization": "Bearer garbage"],
            ["Authorization": "Bearer \(foreign)"], ["Authorization": "Bearer \(assertionAsToken)"],
            ["Authorization": "Bearer \(token)x"],
        ]
        for headers in cases {
            let response = try api.send("GET", "/v1/devices", headers: headers)
            #expect(response.status == 401)
            #expect(response.errorCode == "invalid_token")
            #expect(response.headers["WWW-Authenticate"] == "Bearer error=\"invalid_token\"")
        }
        #expect(try api.send("GET", "/v1/devices", headers: ["authorization": "bearer \(token)"]).status == 200)
        environment.clock.advance(by: 911)
        let expired = try api.authorized("GET", "/v1/devices", token: token)
        #expect(expired.status == 401)
        #expect(expired.errorCode == "invalid_token")
    }
}

extension DeviceLifecycleTests {
    @Test("devices with damaged stored times (far past Int32 years, Int64's limits) are listed, not a trap")
    func damagedTimesAreListed() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        // As a restored or hand-edited database could hold them; no request can store them.
        let times: [(String, DeviceStatus.Stored, Int64)] = [
            ("alice-2", .active, 67_767_976_233_532_800), ("alice-3", .pending, .max), ("alice-4", .pending, .min),
        ]
        for (name, status, time) in times {
            let key = try ServerTestKeys.key(name)
            #expect(
                try api.storage.insertDevice(
                    DeviceRecord(
                        kid: key.publicKey.fingerprint, user: "alice", name: name,
                        publicKeyPEM: key.publicKey.pemRepresentation, status: status, createdAt: time,
                        lastLoginAt: time)))
        }
        let list = try api.authorized("GET", "/v1/devices", token: token)
        #expect(list.status == 200)
        let devices = try #require(list.json?["devices"]?.arrayValue)
        #expect(devices.count == 4)
        #expect(devices.contains { $0["created_at"] == .string("2147483648-01-01T00:00:00Z") })
    }
}
