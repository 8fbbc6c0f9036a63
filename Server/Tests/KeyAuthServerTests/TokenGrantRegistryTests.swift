import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The token endpoint's grants are handlers in a registry: a new grant is one type, and the steps
/// every grant shares (client authentication, required parameters, DPoP, the attempt limits and
/// the metrics) run for it without being written again.
@Suite("Token grant registry")
struct TokenGrantRegistryTests {
    /// A grant this server does not have, answering with the client it was given.
    struct EchoGrant: TokenGrantHandler {
        var grantType: OAuthGrantType { OAuthGrantType(rawValue: "urn:example:echo") }
        var requiredParameters: [String] { ["subject"] }
        var clientAuthentication: TokenClientAuthentication { .confidential }
        var acceptsDPoP: Bool { false }

        func record(_ result: String, in metrics: ServerMetrics) {
            metrics.recordSignInRequest(result: "echo_" + result)
        }

        func grant(_ request: TokenGrantRequest) throws -> TokenGrantOutcome {
            let client = request.client?.id ?? "none"
            return TokenGrantOutcome(
                response: .json(.object(["client": .string(client), "subject": .string(request.required("subject"))])),
                result: "echoed", user: request.required("subject"))
        }
    }

    /// Each test's database, removed when the test's instance goes.
    let environment = TestEnvironment()

    /// A token endpoint with the standard grants and ``EchoGrant``, and a registered client.
    private func endpoint() throws -> (TokenEndpoint, KeyAuthResponder, RelyingParty) {
        let api = try environment.directAPI()
        guard case let transport as DirectTransport = api.transport else { throw TestFailure("not direct") }
        let responder = transport.responder
        let client = try OpenIDTestAPI.addClient(api)
        let endpoint = TokenEndpoint(
            service: responder.service, limits: responder.limits, metrics: responder.metrics,
            handlers: TokenEndpoint.standardHandlers(service: responder.service) + [EchoGrant()])
        return (endpoint, responder, client)
    }

    private func request(_ form: [(String, String)]) -> HTTPRequest {
        HTTPRequest(
            method: "POST", path: "/oauth/token", headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: Array(OpenIDTestAPI.encode(form).utf8), clientAddress: "192.0.2.9")
    }

    private func answer(_ endpoint: TokenEndpoint, _ form: [(String, String)]) -> (
        HTTPResponse, KeyAuthResponder.Caller
    ) {
        var caller = KeyAuthResponder.Caller()
        do {
            return (
                try endpoint.respond(to: request(form), from: RateLimitKey(address: "192.0.2.9"), caller: &caller),
                caller
            )
        } catch {
            return (HTTPResponse(error: error), caller)
        }
    }

    @Test("a registered grant runs after the shared client authentication and parameter checks")
    func registeredGrantRuns() throws {
        let (endpoint, _, client) = try endpoint()
        let grantType = ("grant_type", "urn:example:echo")

        let (missing, _) = answer(
            endpoint, [grantType, ("client_id", client.id), ("client_secret", client.secret ?? "")])
        #expect(missing.status == 400)
        #expect(missing.json?["error"]?.stringValue == "invalid_request")
        #expect(missing.json?["error_description"]?.stringValue == "subject is missing")

        let (unauthenticated, _) = answer(endpoint, [grantType, ("subject", "alice")])
        #expect(unauthenticated.status == 401)
        #expect(unauthenticated.json?["error"]?.stringValue == "invalid_client")

        let (wrongSecret, _) = answer(
            endpoint, [grantType, ("subject", "alice"), ("client_id", client.id), ("client_secret", "wrong")])
        #expect(wrongSecret.json?["error"]?.stringValue == "invalid_client")

        let (granted, caller) = answer(
            endpoint,
            [grantType, ("subject", "alice"), ("client_id", client.id), ("client_secret", client.secret ?? "")])
        #expect(granted.status == 200)
        #expect(granted.json?["client"]?.stringValue == client.id)
        #expect(caller.clientID == client.id)
        #expect(caller.user == "alice")
    }

    @Test("the refusal of an unknown grant type names every registered grant, the new one included")
    func unknownGrantNamesRegistered() throws {
        let (endpoint, _, _) = try endpoint()
        let (response, _) = answer(endpoint, [("grant_type", "password")])
        #expect(response.json?["error"]?.stringValue == "unsupported_grant_type")
        let description = response.json?["error_description"]?.stringValue ?? ""
        #expect(
            description == "only \(OAuthGrantType.jwtBearer), \(OAuthGrantType.ciba), "
                + "\(OAuthGrantType.authorizationCode) and urn:example:echo are supported")
    }

    @Test("a registered grant's outcomes are counted under its own metrics label")
    func registeredGrantMetrics() throws {
        let (endpoint, responder, client) = try endpoint()
        _ = answer(
            endpoint,
            [
                ("grant_type", "urn:example:echo"), ("subject", "a"), ("client_id", client.id),
                ("client_secret", client.secret ?? ""),
            ])
        _ = answer(endpoint, [("grant_type", "urn:example:echo"), ("subject", "a")])
        // Refused before its client is known (a parameter missing), it is still this grant's.
        _ = answer(
            endpoint, [("grant_type", "urn:example:echo"), ("client_id", client.id), ("client_secret", "s")])
        let text = String(
            decoding: responder.operations.respond(to: HTTPRequest(method: "GET", path: "/metrics")).body, as: UTF8.self
        )
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"echo_echoed\"} 1"))
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"echo_invalid_client\"} 1"))
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"echo_invalid_request\"} 1"))
        #expect(!text.contains("keyauth_logins_total{result=\"invalid_request\"}"))
    }
}
