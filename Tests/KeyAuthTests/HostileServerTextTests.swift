import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// What a server sends that the client stores, prints or sends on: an issuer, a device's key ID,
/// an access token. Escape sequences in any of them would reach the user's terminal (`keyauth
/// status`, `devices`, `token`), and a line break in a token would reach a header, so each is
/// refused where it is read.
@Suite("KeyAuthClient refuses server text it would print", .timeLimit(.minutes(5)))
struct HostileServerTextTests {
    @Test(
        "an issuer that is not an http(s) URL of printable ASCII", arguments: ["http://a\u{1B}[2J", "ftp://a", "a b"])
    func issuer(_ issuer: String) async throws {
        let document = JSONValue.object(["issuer": .string(issuer)]).serialized()
        let responder = try LoopbackHTTPResponder { _ in .json(200, document) }
        defer { responder.stop() }
        let error = await #expect(throws: KeyAuthError.self) {
            try await KeyAuthClient(serverURL: responder.url, timeout: 5).discover()
        }
        #expect(error?.message.contains("issuer") == true, "\(error?.message ?? "")")
    }

    @Test("an issuer of another server is refused: the device would sign for it through this one")
    func issuerOfAnotherServer() async throws {
        let issuer = Mutex("")
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, JSONValue.object(["issuer": .string(issuer.withLock { $0 })]).serialized())
        }
        defer { responder.stop() }
        let port = try #require(URLComponents(string: responder.url)?.port)
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 5)
        for other in [
            "https://auth.example.com", "https://127.0.0.1:\(port)", "http://127.0.0.1:\(port + 1)",
            "http://auth.example.com:\(port)",
        ] {
            issuer.withLock { $0 = other }
            let error = await #expect(throws: KeyAuthError.self, "\(other)") { try await client.discover() }
            #expect(error?.message.contains("names another server as its issuer (\(other))") == true)
        }
        // The same server: the same origin under a path, or another loopback name of the port.
        for same in [responder.url, responder.url + "/keyauth", "http://localhost:\(port)", "http://[::1]:\(port)/"] {
            issuer.withLock { $0 = same }
            #expect(try await client.discover().issuer == same)
        }
        #expect(
            KeyAuthClient.isSameServer(issuer: "https://Auth.Example.com/", serverURL: "https://auth.example.com:443"))
        #expect(!KeyAuthClient.isSameServer(issuer: "https://auth.example.com", serverURL: "http://auth.example.com"))
        #expect(!KeyAuthClient.isSameServer(issuer: "https://", serverURL: "https://auth.example.com"))
    }

    @Test("a device whose kid is not a key fingerprint")
    func deviceKeyID() async throws {
        let list = JSONValue.object([
            "devices": .array([.object(["kid": .string("\u{1B}[2J\u{1B}[3J"), "status": "active"])])
        ]).serialized()
        let responder = try LoopbackHTTPResponder { _ in .json(200, list) }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 5)
        let token = AccessToken(value: "a.b.c", expiresAt: Date().addingTimeInterval(600))
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: token) }
        #expect(error?.message.contains("kid") == true, "\(error?.message ?? "")")
    }

    @Test("an access token with a control character or a line break", arguments: ["a.b\r\nX-Evil: 1", "a.\u{1B}[2J.c"])
    func accessToken(_ value: String) async throws {
        let answer = JSONValue.object([
            "access_token": .string(value), "token_type": "Bearer", "expires_in": .integer(60),
        ]).serialized()
        let responder = try LoopbackHTTPResponder { _ in .json(200, answer) }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 5)
        let assertion = try JWTBuilder(key: TestKeys.first, audience: responder.url).sign()
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: assertion) }
        #expect(error?.message.contains("access_token") == true, "\(error?.message ?? "")")
    }
}
