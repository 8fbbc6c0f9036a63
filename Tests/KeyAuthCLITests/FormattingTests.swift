import Foundation
import Testing

@testable import KeyAuthCLI

@Suite("Formatting")
struct FormattingTests {
    @Test("a line on standard error keeps its breaks and tabs and loses every escape a terminal would obey")
    func errorLinesAreTerminalSafe() {
        #expect(CommandIO.terminalSafe("plain\ttext\nnext") == "plain\ttext\nnext")
        #expect(
            CommandIO.terminalSafe("token_type \u{1B}]52;c;aGk=\u{7}\u{9B}2J\u{202E}x")
                == "token_type  ]52;c;aGk=  2J x")
    }

    @Test("timestamps are RFC 3339 UTC with zero padding, as the server writes them")
    func timestamps() {
        #expect(Formatting.timestamp(Date(timeIntervalSince1970: 1_800_000_000)) == "2027-01-15T08:00:00Z")
        #expect(Formatting.timestamp(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00Z")
        #expect(Formatting.timestamp(Date(timeIntervalSince1970: 59.9)) == "1970-01-01T00:00:59Z")
    }

    @Test("a time far beyond any calendar, from a damaged file, prints as seconds instead of trapping")
    func hugeTimes() throws {
        for seconds in [9.2e18, 9_223_372_036_854_775_807, -9.3e18, .infinity, -.infinity, .nan] {
            #expect(!Formatting.timestamp(Date(timeIntervalSince1970: seconds)).isEmpty)
        }
        let account = KeyAuthAccount(
            name: "a@example.test", serverURL: "https://example.test", issuer: "https://example.test", user: "a",
            deviceName: "laptop", keyID: nil, presence: .none, status: .active,
            createdAt: Date(timeIntervalSince1970: 9_223_372_036_854_775_807))
        #expect(account.jsonValue.objectValue?["created_at"]?.integerValue == .max)
    }

    @Test("durations read naturally")
    func durations() {
        #expect(Formatting.duration(42) == "42 s")
        #expect(Formatting.duration(14 * 60 + 5) == "14 min")
        #expect(Formatting.duration(3 * 3600 + 120) == "3 h 2 min")
    }
}
