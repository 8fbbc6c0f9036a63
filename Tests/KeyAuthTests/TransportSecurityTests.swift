import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// A server that sends every request to another origin, and that origin, recording what reaches it.
private struct RedirectPair {
    let origin: LoopbackHTTPResponder
    let elsewhere: LoopbackHTTPResponder

    /// `elsewhere` listens on 127.0.0.2, another host than the server's 127.0.0.1, as an
    /// attacker's server would be.
    init(status: Int) throws {
        let elsewhere = try LoopbackHTTPResponder(host: "127.0.0.2") { _ in
            .json(200, "{\"devices\":[],\"access_token\":\"x.y.z\",\"token_type\":\"Bearer\",\"expires_in\":60}")
        }
        let target = elsewhere.url
        origin = try LoopbackHTTPResponder { request in
            LoopbackHTTPResponder.Response(status: status, headers: ["Location": target + request.path])
        }
        self.elsewhere = elsewhere
    }

    func stop() {
        origin.stop()
        elsewhere.stop()
    }
}

@Suite("KeyAuthClient transport security", .timeLimit(.minutes(10)))
struct TransportSecurityTests {
    @Test(
        "a redirect to another origin is an error naming the Location, and the token goes nowhere else",
        arguments: [301, 302, 303, 307, 308])
    func redirectWithBearer(status: Int) async throws {
        let pair = try RedirectPair(status: status)
        defer { pair.stop() }
        let client = try KeyAuthClient(serverURL: pair.origin.url, timeout: 5)
        let token = AccessToken(value: "secret.bearer.token", expiresAt: Date().addingTimeInterval(600))
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: token) }
        #expect(error?.code == .serverRejected)
        #expect(error?.message.contains("\(status)") == true)
        #expect(error?.message.contains(pair.elsewhere.url + "/v1/devices") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("secret.bearer.token") == false)
        #expect(pair.origin.requests.count == 1)
        #expect(pair.elsewhere.requests.isEmpty)
    }

    @Test("a redirected login sends the assertion to the server only")
    func redirectedLogin() async throws {
        let pair = try RedirectPair(status: 307)
        defer { pair.stop() }
        let client = try KeyAuthClient(serverURL: pair.origin.url, timeout: 5)
        let assertion = try JWTBuilder(key: TestKeys.first, audience: pair.origin.url).sign()
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: assertion) }
        #expect(error?.code == .serverRejected)
        #expect(error?.message.contains(pair.elsewhere.url + "/oauth/token") == true)
        #expect(pair.elsewhere.requests.isEmpty)
    }

    @Test("a redirect to the same server is not followed either")
    func sameOriginRedirect() async throws {
        let responder = try LoopbackHTTPResponder { request in
            guard request.path == "/.well-known/openid-configuration" else {
                return .json(200, "{\"issuer\":\"https://wrong.example\"}")
            }
            return LoopbackHTTPResponder.Response(status: 302, headers: ["Location": "/elsewhere"])
        }
        defer { responder.stop() }
        let error = await #expect(throws: KeyAuthError.self) {
            try await KeyAuthClient(serverURL: responder.url).discover()
        }
        #expect(error?.message.contains("302") == true)
        #expect(error?.message.contains("/elsewhere") == true)
        #expect(responder.requests.map(\.path) == ["/.well-known/openid-configuration"])
    }

    @Test("a Location that echoes a token is withheld from the error")
    func echoedTokenInLocation() async throws {
        let token = try JWTBuilder(key: TestKeys.first, audience: "http://127.0.0.1").sign()
        let responder = try LoopbackHTTPResponder { _ in
            LoopbackHTTPResponder.Response(
                status: 307, headers: ["Location": "https://collector.example/?t=\(token)&x=1"])
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.listDevices(
                accessToken: AccessToken(value: token, expiresAt: Date().addingTimeInterval(60)))
        }
        #expect(error?.code == .serverRejected)
        #expect(error?.message.contains(token) == false)
        #expect(error?.message.contains("withheld") == true)
    }

    @Test(
        "plain http is refused for hosts other than loopback, naming --insecure-http",
        arguments: ["http://example.com", "http://10.0.0.1:8088", "http://127.0.0.1.example.com", "http://[::2]"])
    func plainHTTPRefused(url: String) {
        let error = #expect(throws: KeyAuthError.self) { try KeyAuthClient(serverURL: url) }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("--insecure-http") == true)
        #expect(throws: Never.self) { try KeyAuthClient(serverURL: url, allowInsecureHTTP: true) }
    }

    @Test(
        "loopback hosts may use plain http, and https is always accepted",
        arguments: [
            "http://127.0.0.1:8088", "http://127.0.0.5", "http://127.255.255.254/prefix", "http://[::1]:8088",
            "http://localhost:8088", "http://LOCALHOST", "https://example.com", "https://10.0.0.1:8443/",
        ])
    func loopbackAndHTTPSAccepted(url: String) throws {
        let client = try KeyAuthClient(serverURL: url)
        #expect(!client.serverURL.hasSuffix("/"))
    }

    @Test("only literal loopback addresses and localhost count as loopback")
    func loopbackHosts() {
        for host in ["127.0.0.1", "127.0.0.5", "127.1.2.3", "::1", "[::1]", "0:0:0:0:0:0:0:1", "localhost"] {
            #expect(KeyAuthClient.isLoopbackHost(host), "\(host)")
        }
        for host in [
            "128.0.0.1", "126.255.255.255", "::2", "::ffff:8.8.8.8", "localhost.example.com", "127.0.0.1.nip.io",
        ] {
            #expect(!KeyAuthClient.isLoopbackHost(host), "\(host)")
        }
    }
}
