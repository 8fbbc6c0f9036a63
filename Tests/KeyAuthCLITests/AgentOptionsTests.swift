import KeyAuth
import KeyAuthCLI
import Testing

@Suite("keyauth agent options")
struct AgentOptionsTests {
    @Test("agent takes --account, --timeout and --pin-stdin; the timeout defaults to 8 hours")
    func startOptions() throws {
        #expect(try CommandParser.parse(["agent"]) == .agent(AgentOptions()))
        #expect(AgentOptions().timeout == 8 * 3600)
        var expected = AgentOptions()
        expected.account = "alice"
        expected.timeout = 5400
        expected.pinFromStandardInput = true
        #expect(
            try CommandParser.parse(["agent", "--account", "alice", "--timeout=1h30m", "--pin-stdin"])
                == .agent(expected))
        #expect(try CommandParser.parse(["agent", "--lock"]) == .agent(AgentOptions(action: .lock)))
        #expect(try CommandParser.parse(["agent", "--stop"]) == .agent(AgentOptions(action: .stop)))
    }

    @Test("durations: units s, m, h, d, combined, or bare seconds; nothing else, and never zero")
    func durations() {
        #expect(AgentOptions.seconds(fromDuration: "90") == 90)
        #expect(AgentOptions.seconds(fromDuration: "90s") == 90)
        #expect(AgentOptions.seconds(fromDuration: "30m") == 1800)
        #expect(AgentOptions.seconds(fromDuration: "8h") == 28800)
        #expect(AgentOptions.seconds(fromDuration: "1d2h") == 93600)
        for bad in ["", "0", "0s", "h", "8x", "8h30", "-5", "1.5h", "８h"] {
            #expect(AgentOptions.seconds(fromDuration: bad) == nil, "\(bad)")
        }
    }

    @Test("a bad timeout, --lock with --stop, or a start option with --lock is a usage error")
    func usageErrors() {
        for arguments in [
            ["agent", "--timeout", "soon"], ["agent", "--lock", "--stop"], ["agent", "--lock", "--account", "a"],
            ["agent", "--stop", "--pin-stdin"], ["agent", "extra"],
        ] {
            do throws(KeyAuthError) {
                _ = try CommandParser.parse(arguments)
                Issue.record("\(arguments) parsed")
            } catch {
                #expect(error.code == .usage, "\(arguments)")
            }
        }
    }
}
