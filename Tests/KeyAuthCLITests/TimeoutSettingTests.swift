import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// `KEYAUTH_TIMEOUT`: a number of seconds above 0 and at most a day, else the default of 10.
@Suite("KEYAUTH_TIMEOUT")
struct TimeoutSettingTests {
    static func timeout(_ value: String) -> Double {
        let io = CommandIO(
            writeOutput: { _ in }, writeError: { _ in }, standardInput: -1,
            environment: ["KEYAUTH_TIMEOUT": value], isErrorTerminal: false,
            terminalReader: FixedSecretReader(answers: [String]()), hostName: "test-host")
        return CommandContext(io: io).timeout
    }

    @Test("numbers above 0 up to a day are taken; infinities, NaN, huge, zero, negative and text are not")
    func values() {
        for (text, expected) in [("2.5", 2.5), ("30", 30), ("86400", 86_400)] {
            #expect(Self.timeout(text) == expected, "\(text)")
        }
        // `inf` once reached the timeout message's Int(_:) and ended the command with a trap.
        for text in ["inf", "-inf", "nan", "1e308", "86401", "0", "-1", "", "ten"] {
            #expect(Self.timeout(text) == 10, "\(text)")
        }
    }
}
