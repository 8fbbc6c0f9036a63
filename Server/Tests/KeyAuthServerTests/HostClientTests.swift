import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// Host clients: a Linux host's `pam_keyauth` asks for push logins as a client of the server.
@Suite("Host clients: who may log in to a host by push, and the audit line of each login")
struct HostClientTests {
    /// A server with alice's active laptop and its token; the environment must outlive the API.
    private func aliceServer() throws -> (TestEnvironment, TestAPI, laptop: RSAPrivateKey, token: String) {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        return (environment, api, laptop, try api.activeDevice(user: "alice", key: laptop))
    }

    /// Adds a host client named `name` allowing `users` (none: every user).
    private func addHost(_ api: TestAPI, _ name: String = "web1", users: [String]) throws -> TestClient {
        let (client, secret) = try ClientRegistry(storage: api.storage, now: api.clock.closure).add(
            name: name, kind: .host, allowedUsers: users)
        let stored = try #require(try api.storage.client(id: client.id))
        #expect(stored.kind == .host && stored.allowedUsers == users)
        return TestClient(id: client.id, secret: try #require(secret))
    }

    @Test("a user on the host's list may be asked; another gets 403 access_denied naming the user and host")
    func allowedUsers() throws {
        let (environment, api, _, _) = try aliceServer()
        defer { withExtendedLifetime(environment) {} }
        _ = try api.activeDevice(user: "bob", key: try ServerTestKeys.key("bob-1"))
        let host = try addHost(api, users: ["alice"])
        #expect(try api.backchannelAuthorize(host, user: "alice").status == 200)
        let refused = try api.backchannelAuthorize(host, user: "bob")
        #expect(refused.status == 403, "\(refused.text)")
        #expect(refused.json?["error"] == .string("access_denied"))
        #expect(refused.json?["error_description"]?.stringValue == "user bob may not log in to host web1")
        #expect(try api.storage.openSignInRequests(user: "bob", now: api.clock.now).isEmpty)

        let open = try addHost(api, "web2", users: [])
        #expect(try api.backchannelAuthorize(open, user: "bob").status == 200)
    }

    @Test(
        "an approved push login is audited as host-login by the approving device, in its collection; the device sees the host"
    )
    func auditedLogin() throws {
        let (environment, api, laptop, token) = try aliceServer()
        defer { withExtendedLifetime(environment) {} }
        let host = try addHost(api, users: ["alice"])
        let id = try api.startSignIn(host, user: "alice", bindingMessage: "42")
        let listed = try api.openRequests(token: token)
        let entry = try #require(listed.json?["requests"]?.arrayValue?.first?.objectValue)
        #expect(entry["client_name"] == .string("log in to host web1"))
        let approved = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        #expect(approved.status == 200, "\(approved.text)")
        api.clock.advance(by: 5)
        // A collection whose audit line cannot be written collects nothing: the host's next poll
        // gets the token, instead of finding the login collected.
        try api.executeSQL(
            "CREATE TRIGGER refuse_write BEFORE INSERT ON audit_events WHEN NEW.action = 'host-login' "
                + "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
        #expect(try api.poll(host, id: id).status == 503)
        try api.executeSQL("DROP TRIGGER refuse_write")
        api.clock.advance(by: 5)
        let collected = try api.poll(host, id: id)
        #expect(collected.status == 200, "\(collected.text)")
        let events = try AuditTrail(storage: api.storage).events(since: 0).filter { $0.action == .hostLogin }
        let event = try #require(events.first)
        #expect(events.count == 1)
        #expect(event.actor == "device:" + laptop.publicKey.fingerprint)
        #expect(event.user == "alice" && event.subject == "web1")
        #expect(event.detail?.hasPrefix("push") == true)
    }

    @Test("a push login is approved only after a presence check, and never by a key registered without a PIN")
    func approvalNeedsAPINKey() throws {
        let (environment, api, laptop, token) = try aliceServer()
        defer { withExtendedLifetime(environment) {} }
        // alice's second device, made with --presence none, approved by her laptop.
        let plain = try ServerTestKeys.key("alice-2")
        let registered = try api.registerBody(
            .object([
                "user": "alice", "name": "ci box", "public_key": .string(plain.publicKey.pemRepresentation),
                "proof": .string(try api.assertion(plain)), "key_protection": "none",
            ]))
        #expect(registered.status == 202, "\(registered.text)")
        #expect(try api.approveDevice(plain.publicKey.fingerprint, approver: laptop, token: token).status == 200)
        let host = try addHost(api, users: ["alice"])
        let id = try api.startSignIn(host, user: "alice", bindingMessage: "42")

        // The key without a PIN is told at the code, and at the answer, whatever its amr says.
        let plainToken = try api.accessToken(plain)
        let atCode = try api.checkCode(id, code: "42", token: plainToken)
        #expect(atCode.status == 403 && atCode.text.contains("not registered as protected by a PIN"), "\(atCode.text)")
        for methods in [["swk"], ["swk", "pin"]] {
            let byPlain = try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(plain, id: id, methods: methods),
                token: plainToken)
            #expect(byPlain.status == 403 && byPlain.errorCode == "access_denied", "\(byPlain.text)")
            #expect(byPlain.text.contains("not registered as protected by a PIN"))
        }
        let withoutPresence = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id, methods: ["swk"]),
            token: token)
        #expect(withoutPresence.status == 400 && withoutPresence.errorCode == "invalid_grant")
        #expect(try api.storage.signInRequest(id: id)?.status == .pending)

        let approved = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        #expect(approved.status == 200, "\(approved.text)")
        api.clock.advance(by: 5)
        #expect(try api.poll(host, id: id).status == 200)

        // Approvals stored before the rule are checked again when the host collects them.
        for (approver, methods) in [(laptop, ["swk"]), (plain, ["swk", "pin"])] {
            let stored = try api.startSignIn(host, user: "alice", bindingMessage: "17")
            #expect(
                try api.storage.answerSignInRequest(
                    id: stored, status: .approved, answeringKID: approver.publicKey.fingerprint, methods: methods,
                    at: api.clock.now))
            api.clock.advance(by: 5)
            let collected = try api.poll(host, id: stored)
            #expect(collected.errorCode == "access_denied", "\(methods) \(collected.text)")
        }
    }

    @Test("an application's sign-in writes no host-login line, and --allow-user needs --kind host")
    func applicationsAreNotHosts() throws {
        let (environment, api, laptop, token) = try aliceServer()
        defer { withExtendedLifetime(environment) {} }
        #expect(throws: ServerConfigurationError.self) {
            try ClientRegistry(storage: api.storage).add(name: "desk", allowedUsers: ["alice"])
        }
        #expect(throws: ServerConfigurationError.self) {
            try ClientRegistry(storage: api.storage).add(
                name: "web", redirectURIs: ["https://web.example/cb"], kind: .host)
        }
        let client = try api.addClient()
        let id = try api.startSignIn(client, user: "alice")
        _ = try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        api.clock.advance(by: 5)
        #expect(try api.poll(client, id: id).status == 200)
        #expect(try AuditTrail(storage: api.storage).events(since: 0).allSatisfy { $0.action != .hostLogin })
    }

    @Test(
        "clients add --kind host --allow-user makes a host client; list shows its type and users; a bad kind is refused"
    )
    func addCommand() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        try StorageFactory.open(database).close()
        let add = CapturedOutput()
        let status = ServerCommand.main(
            arguments: [
                "clients", "add", "web1", "--kind", "host", "--allow-user", "alice", "--allow-user", "bob", "--db",
                database,
            ], environment: [:], output: add.output)
        #expect(status == 0, "\(add.error)")
        // What pam.conf holds: the lines as printed.
        let config = add.standard.split(separator: "\n").map(String.init)
        #expect(config.count == 2 && config[0].hasPrefix("client_id=") && config[1].hasPrefix("client_secret="))
        let list = CapturedOutput()
        #expect(
            ServerCommand.main(arguments: ["clients", "list", "--db", database], environment: [:], output: list.output)
                == 0)
        #expect(
            list.standard.split(separator: "\n").last?.split(separator: " ").suffix(5) == [
                "host", "-", "-", "alice,bob", "web1",
            ])
        let wrong = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["clients", "add", "web2", "--kind", "server", "--db", database], environment: [:],
                output: wrong.output) == 64)
        #expect(wrong.error.contains("--kind: expected application or host"), "\(wrong.error)")
    }

    @Test("clients add whose audit entry cannot be written still shows the secret, and says the client stands")
    func addCommandAuditFails() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let database = environment.databasePath
        let storage = try StorageFactory.open(database)
        try #require(storage as? SQLStorage).database.write { connection throws(StorageError) in
            _ = try connection.execute(
                "CREATE TRIGGER refuse_write BEFORE INSERT ON audit_events WHEN NEW.action = 'add-client' "
                    + "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END", [])
        }
        storage.close()
        let add = CapturedOutput()
        let status = ServerCommand.main(
            arguments: ["clients", "add", "web1", "--db", database], environment: [:], output: add.output)
        #expect(status == 1)
        #expect(add.standard.contains("client_secret="), "the only time the secret can be shown")
        #expect(add.error.contains("added client"), "\(add.error)")
        #expect(add.error.contains("the change stands"), "\(add.error)")
    }

    @Test("a device key login on a host that names its host client obeys the client's user list")
    func onlineLoginObeysTheList() throws {
        let (environment, api, laptop, _) = try aliceServer()
        defer { withExtendedLifetime(environment) {} }
        let allowing = try addHost(api, "laptop", users: ["alice"])
        let refusing = try addHost(api, "shared", users: ["bob"])
        func login(at client: String) throws -> HTTPResponse {
            let statement: JSONValue = .object([
                "host": .string("laptop"), "service": .string("sudo"), "linux_user": .string("alice"),
                "host_client": .string(client),
            ])
            return try api.login(assertion: try api.assertion(laptop, claims: ["host_login": statement]))
        }
        let allowed = try login(at: allowing.id)
        #expect(allowed.status == 200, "\(allowed.text)")
        let event = try AuditTrail(storage: api.storage).events(since: 0).last { $0.action == .hostLogin }
        #expect(event?.detail == "online, service sudo, linux user alice, host client \(allowing.id)")
        for (client, reason) in [
            (refusing.id, "user alice may not log in to host shared"),
            ("no-such-client", "the host is not a host client of this server"),
        ] {
            let refused = try login(at: client)
            #expect(refused.status == 403, "\(refused.text)")
            #expect(refused.json?["error"] == .string("access_denied"))
            #expect(refused.json?["error_description"]?.stringValue == reason)
        }
    }
}
