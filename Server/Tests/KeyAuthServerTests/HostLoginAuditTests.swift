import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// A login assertion's `host_login` statement (made by pam_keyauth's helper) in the audit trail.
@Suite("Login: a host login's statement in the audit trail")
struct HostLoginAuditTests {
    /// Logs alice's device in with `claims` added; the response's status and the audit trail.
    private func login(_ claims: [String: JSONValue]) throws -> (status: Int, error: String?, events: [AuditEvent]) {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let response = try api.login(assertion: try api.assertion(key, claims: claims))
        let events = try AuditTrail(storage: api.storage).events(since: 0).filter { $0.action == .hostLogin }
        return (response.status, response.json?["error"]?.stringValue, events)
    }

    @Test("a host login is recorded with the device, the user, the host, the service and the Linux user")
    func recorded() throws {
        let statement: JSONValue = .object([
            "host": .string("laptop.example"), "service": .string("sudo"), "linux_user": .string("alice"),
        ])
        let result = try login(["host_login": statement])
        #expect(result.status == 200)
        let event = try #require(result.events.first)
        #expect(result.events.count == 1)
        #expect(event.actor == "device:" + (try ServerTestKeys.key("alice-1")).publicKey.fingerprint)
        #expect(event.user == "alice")
        #expect(event.subject == "laptop.example")
        #expect(event.detail == "online, service sudo, linux user alice")
    }

    @Test("a statement naming the keyauth user the host expects admits only that user's devices")
    func keyauthUser() throws {
        func statement(_ user: String) -> JSONValue {
            .object([
                "host": .string("laptop.example"), "service": .string("sudo"), "linux_user": .string("root"),
                "keyauth_user": .string(user),
            ])
        }
        let refused = try login(["host_login": statement("mallory")])
        #expect(refused.status == 403 && refused.error == "access_denied")
        #expect(refused.events.isEmpty)
        // Exactly: no case folding, no Unicode equivalence.
        #expect(try login(["host_login": statement("Alice")]).status == 403)
        #expect(try login(["host_login": statement("alic\u{65}\u{301}")]).status == 403)
        let admitted = try login(["host_login": statement("alice")])
        #expect(admitted.status == 200 && admitted.events.count == 1)
    }

    @Test("a login without the statement records nothing")
    func notStated() throws {
        let result = try login([:])
        #expect(result.status == 200)
        #expect(result.events.isEmpty)
    }

    @Test(
        "a malformed statement is refused, not dropped",
        arguments: [
            JSONValue.string("laptop"), .object(["host": .string("laptop"), "service": .string("sudo")]),
            .object(["host": .string(""), "service": .string("sudo"), "linux_user": .string("a")]),
            .object(["host": .string("lap\ntop"), "service": .string("sudo"), "linux_user": .string("a")]),
            .object(["host": .string("laptop"), "service": .integer(1), "linux_user": .string("a")]),
            .object([
                "host": .string("laptop"), "service": .string("sudo"), "linux_user": .string("a"),
                "extra": .string("x"),
            ]),
            .object([
                "host": .string("laptop"), "service": .string("sudo"), "linux_user": .string("a"),
                "keyauth_user": .integer(1),
            ]),
        ])
    func malformed(statement: JSONValue) throws {
        let result = try login(["host_login": statement])
        #expect(result.status == 400)
        #expect(result.error == "invalid_grant")
        #expect(result.events.isEmpty)
    }
}

/// A device's stated key protection (`key_protection`, PROTOCOL.md section 4) decides whether it
/// may log in to a host, where its PIN stands in for a password.
@Suite("Login: host logins need a key registered with a PIN")
struct HostLoginKeyProtectionTests {
    private static let statement: JSONValue = .object([
        "host": .string("laptop.example"), "service": .string("sudo"), "linux_user": .string("alice"),
    ])

    /// Registers `key` for alice stating `protection` (nothing when nil); the response.
    private static func register(_ api: TestAPI, _ key: RSAPrivateKey, _ protection: String?) throws -> HTTPResponse {
        var body: [String: JSONValue] = [
            "user": "alice", "name": "device", "public_key": .string(key.publicKey.pemRepresentation),
            "proof": .string(try api.assertion(key)),
        ]
        if let protection { body["key_protection"] = .string(protection) }
        return try api.registerBody(.object(body))
    }

    private static func hostLogin(_ api: TestAPI, _ key: RSAPrivateKey) throws -> HTTPResponse {
        try api.login(assertion: try api.assertion(key, claims: ["host_login": statement]))
    }

    @Test(
        "a key registered without a PIN, approved by one, or unstated logs in but not to a host; with a PIN it does")
    func refusedWithoutPIN() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let plain = try ServerTestKeys.key("alice-1")
        #expect(try Self.register(api, plain, "none").status == 201)
        #expect(try api.login(assertion: try api.assertion(plain)).status == 200)
        let refused = try Self.hostLogin(api, plain)
        #expect(refused.status == 403 && refused.errorCode == "access_denied")
        #expect(refused.text.contains("not registered as protected by a PIN"))
        #expect(try AuditTrail(storage: api.storage).events(since: 0).filter { $0.action == .hostLogin }.isEmpty)

        // A key stating a PIN, approved by the key without one: no better than its approver.
        let stated = try ServerTestKeys.key("alice-2")
        #expect(try Self.register(api, stated, "pin").status == 202)
        let approved = try api.approveDevice(
            stated.publicKey.fingerprint, approver: plain, token: try api.accessToken(plain))
        #expect(approved.status == 200, "\(approved.text)")
        #expect(try Self.hostLogin(api, stated).status == 403)

        // A new user's first key with a PIN, and one that says nothing (an older client).
        let other = api
        let pinned = try ServerTestKeys.key("bob-1")
        var body: [String: JSONValue] = [
            "user": "bob", "name": "device", "public_key": .string(pinned.publicKey.pemRepresentation),
            "proof": .string(try other.assertion(pinned)), "key_protection": "pin",
        ]
        #expect(try other.registerBody(.object(body)).status == 201)
        let bobStatement: JSONValue = .object([
            "host": .string("laptop.example"), "service": .string("sudo"), "linux_user": .string("bob"),
        ])
        #expect(
            try other.login(assertion: try other.assertion(pinned, claims: ["host_login": bobStatement])).status == 200)
        let unstated = try ServerTestKeys.key("carol-1")
        body = [
            "user": "carol", "name": "device", "public_key": .string(unstated.publicKey.pemRepresentation),
            "proof": .string(try other.assertion(unstated)),
        ]
        #expect(try other.registerBody(.object(body)).status == 201)
        let carolStatement: JSONValue = .object([
            "host": .string("laptop.example"), "service": .string("sudo"), "linux_user": .string("carol"),
        ])
        // A key whose registration said nothing (an older client, or an application that did
        // not state it) is as good as one without a PIN: its owner's malware could put one on it.
        #expect(try other.login(assertion: try other.assertion(unstated)).status == 200)
        let unstatedHost = try other.login(
            assertion: try other.assertion(unstated, claims: ["host_login": carolStatement]))
        #expect(unstatedHost.status == 403 && unstatedHost.errorCode == "access_denied", "\(unstatedHost.text)")
    }

    @Test("recovery codes made by a key without a PIN enrol a key that cannot log in to a host, whatever it states")
    func recoveryCodesOfKeyWithoutPIN() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.recoveryCodeIterations = 1000 }
        let plain = try ServerTestKeys.key("alice-1")
        #expect(try Self.register(api, plain, "none").status == 201)
        let made = try RecoveryCodeTests.makeCodes(api, key: plain, token: try api.accessToken(plain))
        let code = try #require(made.json?["codes"]?.arrayValue?.first?.stringValue)
        let stated = try ServerTestKeys.key("alice-2")
        let enrolled = try api.registerBody(
            .object([
                "user": "alice", "name": "new laptop", "public_key": .string(stated.publicKey.pemRepresentation),
                "proof": .string(try api.assertion(stated)), "recovery_code": .string(code), "key_protection": "pin",
            ]))
        #expect(enrolled.status == 201, "\(enrolled.text)")
        #expect(try api.storage.device(kid: stated.publicKey.fingerprint)?.keyProtection == KeyProtection.withoutPIN)
        #expect(try Self.hostLogin(api, stated).status == 403)
    }

    @Test("a key a recovery code enrolled logs in to a host without an offline grant until its notice ends")
    func noOfflineGrantWhileAnnounced() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.recoveryCodeIterations = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        #expect(try Self.register(api, laptop, "pin").status == 201)
        let made = try RecoveryCodeTests.makeCodes(api, key: laptop, token: try api.accessToken(laptop))
        let code = try #require(made.json?["codes"]?.arrayValue?.first?.stringValue)
        let thief = try ServerTestKeys.key("alice-2")
        let enrolled = try api.registerBody(
            .object([
                "user": "alice", "name": "new laptop", "public_key": .string(thief.publicKey.pemRepresentation),
                "proof": .string(try api.assertion(thief)), "recovery_code": .string(code), "key_protection": "pin",
            ]))
        #expect(enrolled.status == 201, "\(enrolled.text)")
        // A grant would let it in offline after alice's denial revoked it.
        let announced = try Self.hostLogin(api, thief)
        #expect(announced.status == 200, "\(announced.text)")
        #expect(announced.json?["access_token"] != nil && announced.json?["offline_grant"] == nil)
        #expect(try Self.hostLogin(api, laptop).json?["offline_grant"] != nil)
        environment.clock.advance(by: 86_401)
        #expect(try Self.hostLogin(api, thief).json?["offline_grant"] != nil)
    }

    @Test("key_protection other than pin or none is refused")
    func malformed() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        for value in ["PIN", "", "tpm"] {
            let answer = try Self.register(api, key, value)
            #expect(answer.status == 400 && answer.errorCode == "invalid_request", "\(value)")
        }
        var body: [String: JSONValue] = [
            "user": "alice", "name": "device", "public_key": .string(key.publicKey.pemRepresentation),
            "proof": .string(try api.assertion(key)),
        ]
        body["key_protection"] = .integer(1)
        #expect(try api.registerBody(.object(body)).status == 400)
    }
}
