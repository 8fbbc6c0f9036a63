import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What `keyauth status` and the errors say about a running `keyauth agent`.
@Suite("keyauth agent in status and errors", .serialized, .timeLimit(.minutes(10)))
struct AgentStatusTests {
    @Test("status shows whether the agent holds the key, and a locked agent is named when a login cannot sign")
    func statusAndLockedAgent() throws {
        try AgentTests.withUnlockedAgent { machine, agent in
            let unlocked = try machine.run(["status"], extraEnvironment: agent.environment)
            #expect(unlocked.status == 0, "\(unlocked.standardError)")
            #expect(unlocked.standardOutput.contains("  agent:       holds the key until "))
            #expect(unlocked.standardOutput.contains("(at \(agent.socketPath))"))
            let json = try machine.run(["status", "--json"], extraEnvironment: agent.environment)
            let entry = try #require(try JSONValue(parsing: json.standardOutput)["accounts"]?.arrayValue?.first)
            #expect(entry["agent"] == .string("unlocked"))
            #expect(entry["agent_expires_at"]?.stringValue != nil)
            // Without the agent's socket in the environment, nothing is said of it.
            let elsewhere = try machine.run(
                ["status", "--json"], extraEnvironment: ["XDG_RUNTIME_DIR": "/nonexistent"])
            let noAgent = try #require(try JSONValue(parsing: elsewhere.standardOutput)["accounts"]?.arrayValue?.first)
            #expect(noAgent["agent"] == .null)

            #expect(try machine.run(["agent", "--lock"], extraEnvironment: agent.environment).status == 0)
            let locked = try machine.run(["status"], extraEnvironment: agent.environment)
            #expect(
                locked.standardOutput.contains(
                    "  agent:       locked (at \(agent.socketPath)); run `keyauth agent` to unlock it"))
            let login = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(login.status == 77)
            expectOneErrorLine(login)
            #expect(login.standardError.contains("no terminal to ask for the PIN"))
            #expect(
                login.standardError.contains(
                    "the keyauth agent at \(agent.socketPath) is locked: run `keyauth agent` to unlock it"))
        }
    }

    @Test("an agent without XDG_RUNTIME_DIR says where the runtime directory usually is")
    func runtimeDirectoryHint() throws {
        let machine = Machine()
        defer { machine.home.remove() }
        let result = try machine.run(["agent", "--stop"])
        #expect(result.status == 1)
        expectOneErrorLine(result)
        #expect(result.standardError.contains("/run/user/\(geteuid())"), "\(result.standardError)")
        #expect(
            KeyAgentSocket.runtimeDirectoryHint(uid: 1000, exists: true)
                == "yours is /run/user/1000: export XDG_RUNTIME_DIR=/run/user/1000")
        #expect(KeyAgentSocket.runtimeDirectoryHint(uid: 1000, exists: false).contains("loginctl enable-linger"))
    }
}
