import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// The offline grant a host login's token response carries (PROTOCOL.md section 7.2, "Offline
/// grants"): signed with the published keys, a `typ` of its own, for the stated host and user.
@Suite("Login: a host login's offline grant")
struct OfflineGrantIssueTests {
    private static let statement: JSONValue = .object([
        "host": .string("laptop.example"), "service": .string("sudo"), "linux_user": .string("alice"),
    ])

    /// A server with alice's device registered and active; the environment keeps it alive.
    private func registeredAlice() throws -> (TestEnvironment, TestAPI, RSAPrivateKey) {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        return (environment, api, key)
    }

    @Test("a host login's answer has a grant for the device, the host and the users, signed with a published key")
    func issued() throws {
        let (environment, api, key) = try registeredAlice()
        defer { withExtendedLifetime(environment) {} }
        let response = try api.login(assertion: try api.assertion(key, claims: ["host_login": Self.statement]))
        #expect(response.status == 200)
        let grant = try #require(response.json?["offline_grant"]?.stringValue)
        let jws = try CompactJWS(parsing: grant, algorithms: OfflineGrantFormat.algorithms)
        #expect(jws.header["typ"] == .string("keyauth-offline-grant+jwt"))
        let keySet = try JWKSet(json: try api.send("GET", "/.well-known/jwks.json").body)
        let kid = try #require(jws.keyID)
        let published = try #require(keySet[kid])
        #expect(jws.isSignatureValid(with: published))
        let claims = try jws.claims()
        #expect(claims["iss"] == .string(api.issuer))
        #expect(claims["sub"] == .string("alice"))
        #expect(claims["host"] == .string("laptop.example"))
        #expect(claims["linux_user"] == .string("alice"))
        #expect(claims["cnf"]?["jkt"] == .string(key.publicKey.fingerprint))
        let issuedAt = try #require(claims["iat"]?.integerValue)
        #expect(claims["exp"]?.integerValue == issuedAt + 604_800)
        #expect(claims["aud"] == nil && claims["client_id"] == nil)

        // A grant is no access token, whatever it is presented to.
        #expect(try api.authorized("GET", "/v1/devices", token: grant).status == 401)
    }

    @Test("a login that is not a host login has no grant")
    func notIssued() throws {
        let (environment, api, key) = try registeredAlice()
        defer { withExtendedLifetime(environment) {} }
        let response = try api.login(key)
        #expect(response.status == 200)
        #expect(response.json?["offline_grant"] == nil)
    }
}
