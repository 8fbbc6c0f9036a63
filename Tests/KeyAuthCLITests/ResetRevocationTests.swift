import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// `keyauth reset` forgets the key only on keyauth-server's own word that the device is gone or
/// was never active: an answer without an OAuth error body (a proxy's page) leaves the
/// revocation unconfirmed and everything here kept.
@Suite("keyauth reset and answers that are not the server's", .timeLimit(.minutes(5)))
struct ResetRevocationTests {
    /// A device registered without a PIN on an in-process server, whose key ID is returned.
    static func registered(_ harness: CommandHarness, _ server: InProcessKeyAuthServer) async throws -> String {
        let result = await harness.run([
            "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none",
        ])
        try #require(result.status == 0, "\(result.standardError)")
        let name = try harness.accounts.resolve(nil)
        return try harness.accounts.keyPairStore(for: name).loadPublicKey().fingerprint
    }

    /// Answers every `DELETE` with `response`, and forwards the rest to the server.
    static func answeringDeletes(with response: LoopbackHTTPResponder.Response) -> InProcessKeyAuthServer.Interceptor {
        { request, forward in request.method == "DELETE" ? response : forward() }
    }

    /// Answers every login (`POST /oauth/token`) with `response`, and forwards the rest.
    static func answeringLogins(with response: LoopbackHTTPResponder.Response) -> InProcessKeyAuthServer.Interceptor {
        { request, forward in request.method == "POST" && request.path == "/oauth/token" ? response : forward() }
    }

    @Test("an HTML 403 to the revocation keeps the key and the account and exits 69 naming --local-only")
    func htmlForbiddenKeepsTheKey() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let keyID = try await Self.registered(harness, server)
        let name = try harness.accounts.resolve(nil)
        server.interceptor = Self.answeringDeletes(
            with: .init(
                status: 403, headers: ["Content-Type": "text/html"],
                body: Array("<html><body><h1>403 Forbidden</h1></body></html>".utf8)))
        let reset = await harness.run(["reset"])
        #expect(reset.status == 69)
        #expect(reset.errorLines.count == 1)
        #expect(reset.standardError.contains("not confirmed"), "\(reset.standardError)")
        #expect(reset.standardError.contains("--local-only"))
        #expect(server.requests.contains { $0.method == "DELETE" })
        #expect(harness.accounts.accountNames() == [name])
        #expect(try harness.accounts.keyPairStore(for: name).hasKey)
        #expect(server.status(of: keyID) == "active")
    }

    @Test("a 403 access_denied (a device policy the device does not meet) keeps the key of the active device")
    func policyRefusalKeepsTheKey() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        let keyID = try await Self.registered(harness, server)
        let name = try harness.accounts.resolve(nil)
        // No stored token: the reset logs in first, and the policy refuses that login.
        #expect(await harness.run(["logout"]).status == 0)
        server.interceptor = Self.answeringLogins(
            with: .oauthError(403, "access_denied", "this device's tier is below the device policy"))
        let reset = await harness.run(["reset"])
        #expect(reset.status == 77)
        #expect(reset.errorLines.count == 1)
        #expect(reset.standardError.contains("keyauth devices revoke \(keyID)"), "\(reset.standardError)")
        #expect(reset.standardError.contains("--local-only"))
        #expect(!reset.standardError.contains("to start again"), "\(reset.standardError)")
        #expect(!reset.standardOutput.contains("never active"))
        #expect(harness.accounts.accountNames() == [name])
        #expect(try harness.accounts.keyPairStore(for: name).hasKey)
        #expect(server.status(of: keyID) == "active")

        // A denied device's own refusal is a 400: that one still deletes here.
        server.interceptor = Self.answeringLogins(with: .oauthError(400, "access_denied", "this device was denied"))
        let denied = await harness.run(["reset"])
        #expect(denied.status == 0, "\(denied.standardError)")
        #expect(denied.standardOutput.contains("never active"))
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test("keyauth-server's own not_found still lets reset delete the account here")
    func serverNotFoundDeletes() async throws {
        let harness = CommandHarness()
        let server = try InProcessKeyAuthServer()
        defer {
            server.stop()
            harness.home.remove()
        }
        _ = try await Self.registered(harness, server)
        server.interceptor = Self.answeringDeletes(with: .oauthError(404, "not_found", "no such device"))
        let reset = await harness.run(["reset"])
        #expect(reset.status == 0, "\(reset.standardError)")
        #expect(reset.standardOutput.contains("nothing to revoke"))
        #expect(harness.accounts.accountNames().isEmpty)
    }
}
