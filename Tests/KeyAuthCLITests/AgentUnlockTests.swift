import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// The agent's `unlock` request answered in-process: a PIN sent over the socket costs what a
/// login's PIN costs, and a timeout the command line would refuse is refused here too.
@Suite("keyauth agent unlock request", .serialized, .timeLimit(.minutes(5)))
struct AgentUnlockTests {
    static let pin = "246813"

    /// A PIN-protected key file in a fresh directory, and an agent server for it.
    static func withServer(_ body: (KeyPairStore, KeyAgentServer) throws -> Void) throws {
        let directory = TemporaryDirectory("keyauth-agent-unlock")
        defer { directory.remove() }
        let store = KeyPairStore(directory: directory.path + "/key")
        let key = try store.createKey(bits: 2048, pin: SecretBytes(Array(pin.utf8)))
        let server = try KeyAgentServer(
            account: "alice", keyID: key.publicKey.fingerprint, store: store,
            socketPath: directory.path + "/agent.sock", errorOutput: { _ in })
        try body(store, server)
    }

    /// What the agent answers to an `unlock` whose PIN frame held `pin`.
    static func unlock(_ server: KeyAgentServer, _ pin: String, timeout: Double? = nil) -> KeyAgentResponse {
        server.answer(
            KeyAgentRequest(op: "unlock", pinFrame: true, timeout: timeout), pin: SecretBytes(Array(pin.utf8)))
    }

    static func failures(_ store: KeyPairStore) throws -> Int {
        guard FileManager.default.fileExists(atPath: store.pinAttemptsPath) else { return 0 }
        let data = try Data(contentsOf: URL(fileURLWithPath: store.pinAttemptsPath))
        let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        return object?["failures"] as? Int ?? -1
    }

    @Test("wrong PINs sent to the agent are counted, and after five the right one waits for the delay")
    func countsWrongPINs() throws {
        try Self.withServer { store, server in
            let right = Self.unlock(server, Self.pin)
            #expect(right.ok, "\(right.message ?? "")")
            server.clear()
            for attempt in 1...PINPresence.freeAttempts {
                let wrong = Self.unlock(server, "000000")
                #expect(wrong.error == KeyAuthError.Code.wrongPIN.rawValue)
                let failures = try Self.failures(store)
                #expect(failures == attempt)
                // The wait the last free attempt starts reaches the client, which would otherwise
                // ask for a PIN that is refused unread.
                #expect((wrong.retryAfter != nil) == (attempt == PINPresence.freeAttempts))
            }
            let locked = Self.unlock(server, Self.pin)
            #expect(!locked.ok)
            #expect(locked.error == KeyAuthError.Code.lockedOut.rawValue)
            #expect(locked.retryAfter.map { $0 > 0 } == true)
            #expect(AgentCommand.error(from: locked).retryAfter == locked.retryAfter)
            #expect(server.expiresAt == nil)
        }
    }

    @Test("a right PIN resets the count, as a login's does")
    func successResets() throws {
        try Self.withServer { store, server in
            _ = Self.unlock(server, "000000")
            _ = Self.unlock(server, "000001")
            let before = try Self.failures(store)
            #expect(before == 2)
            #expect(Self.unlock(server, Self.pin).ok)
            let after = try Self.failures(store)
            #expect(after == 0)
        }
    }

    @Test(
        "a timeout outside what --timeout accepts is refused before the PIN is tried",
        arguments: [0, -1, 0.5, Double.nan, .infinity, -.infinity, 1e308, 86_400_000_001]
    )
    func refusesTimeouts(_ timeout: Double) throws {
        try Self.withServer { store, server in
            let answer = Self.unlock(server, Self.pin, timeout: timeout)
            #expect(!answer.ok)
            #expect(answer.error == KeyAuthError.Code.invalidArgument.rawValue)
            #expect(answer.message?.contains("timeout") == true)
            #expect(server.expiresAt == nil)
            let failures = try Self.failures(store)
            #expect(failures == 0)
        }
    }

    @Test("the largest timeout --timeout accepts is accepted")
    func acceptsLargestTimeout() throws {
        try Self.withServer { _, server in
            let answer = Self.unlock(server, Self.pin, timeout: 86_400_000_000)
            #expect(answer.ok, "\(answer.message ?? "")")
            #expect(server.expiresAt != nil)
        }
    }
}
