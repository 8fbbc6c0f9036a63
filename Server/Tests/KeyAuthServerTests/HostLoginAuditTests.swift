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
