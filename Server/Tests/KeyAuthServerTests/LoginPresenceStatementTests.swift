import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// The `amr` of a device's access token: the login assertion's statement when it has one.
@Suite("Login: the device's presence statement in the access token")
struct LoginPresenceStatementTests {
    /// The `amr` of the token a login with `claims` gets, space-separated, or `error CODE` when
    /// the login is refused.
    private func loginAMR(_ claims: [String: JSONValue]) throws -> String {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let response = try api.login(assertion: try api.assertion(key, claims: claims))
        guard response.status == 200, let token = response.json?["access_token"]?.stringValue else {
            return "error " + (response.json?["error"]?.stringValue ?? "status \(response.status)")
        }
        let payload = try #require(token.split(separator: ".").dropFirst().first.flatMap { Base64URL.decode($0) })
        let json = try JSONValue(parsing: String(decoding: payload, as: UTF8.self))
        return (json["amr"]?.arrayValue?.compactMap(\.stringValue) ?? []).joined(separator: " ")
    }

    @Test("an assertion that states a PIN gets a token whose amr says pin")
    func statedPIN() throws {
        #expect(try loginAMR(["amr": .array(["hwk", "pin"])]) == "hwk pin")
        #expect(try loginAMR(["amr": .array(["swk", "user"])]) == "swk user")
    }

    @Test("an assertion without amr gets swk, as before")
    func noStatement() throws {
        #expect(try loginAMR([:]) == "swk")
    }

    @Test(
        "a malformed statement is refused, not dropped",
        arguments: [["pin"], ["swk", "hwk"], ["swk", "pin", "user"], ["swk", "otp"]])
    func malformed(methods: [String]) throws {
        #expect(try loginAMR(["amr": .array(methods.map(JSONValue.string))]) == "error invalid_grant")
    }
}
