import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// The push login's code against the real responder: a code that what the device shows beside
/// its prompt spells out is refused by the server, and the helper tries another.
@Suite("Push login codes", .timeLimit(.minutes(10)))
struct PushLoginCodeTests {
    /// A push login of alice through `server` as the host client `name`, with `codes` in turn.
    static func pushLogin(
        _ server: InProcessKeyAuthServer, hostName name: String, codes: [String]
    ) throws -> (PushLogin, KeyAuthClient.ClientSecret) {
        let (id, secret) = try server.addClient(name: name)
        let login = PushLogin(
            client: try KeyAuthClient(serverURL: server.url),
            credentials: HostClientConfig(clientID: id, clientSecret: secret),
            keyauthUser: "alice", linuxUser: "alice", send: { _ in }, moduleGone: { false },
            codes: { attempt in codes[min(attempt, codes.count - 1)] })
        return (login, KeyAuthClient.ClientSecret(id: id, secret: secret))
    }

    @Test("codes spelled out by the host's name or the address it asks from are refused; the next is taken")
    func spelledOutCodesAreReplaced() async throws {
        let server = try InProcessKeyAuthServer()
        defer { server.stop() }
        try server.addDevices(1, user: "alice")
        // The server sees the host at 192.0.2.10: 19, 92 and 10 are on the device's screen.
        let (login, secret) = try Self.pushLogin(server, hostName: "db42", codes: ["42", "19", "10", "57"])
        guard case .started(let request, let code) = await login.start(secret) else {
            Issue.record("no request was started")
            return
        }
        #expect(code == "57")
        #expect(!request.id.isEmpty)
        // Every code refused: the login ends refused, with the server's reason.
        let (stuck, stuckSecret) = try Self.pushLogin(server, hostName: "db42", codes: ["42"])
        guard case .ended(.refused(let reason)) = await stuck.start(stuckSecret) else {
            Issue.record("a code the host's name spells out was taken")
            return
        }
        #expect(reason.contains("invalid_binding_message"), "\(reason)")
    }

    @Test("the random codes are 2 digits, then 3 in the second half of the attempts")
    func randomCodes() {
        for attempt in 0..<PushLogin.codeAttempts {
            let code = PushLogin.randomCode(attempt: attempt)
            #expect(code.count == (attempt < PushLogin.codeAttempts / 2 ? 2 : 3) && Int(code) != nil, "\(code)")
        }
    }
}
