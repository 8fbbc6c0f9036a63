import KeyAuth
import KeyAuthArguments
import Testing

@testable import KeyAuthCLI

@Suite("Unknown commands and durations, shared by keyauth and keyauth-server")
struct UnknownCommandTests {
    @Test(
        "an unknown keyauth command suggests the nearest one",
        arguments: [
            (["regster"], "unknown command \"regster\"; did you mean register? (see `keyauth --help`)"),
            (["help", "stauts"], "unknown command \"stauts\"; did you mean status? (see `keyauth --help`)"),
            (["frobnicate"], "unknown command \"frobnicate\" (see `keyauth --help`)"),
        ])
    func suggestion(_ arguments: [String], _ message: String) {
        do {
            _ = try CommandParser.parse(arguments)
            Issue.record("parsed \(arguments)")
        } catch {
            #expect(error.code == .usage)
            #expect(error.message == message)
        }
    }

    @Test(
        "nearest word: one edit, two for long words, a swap counts one, a unique start",
        arguments: [
            ("enrol", "enroll"), ("devcies", "devices"), ("revok", "revoke"), ("lits", "list"),
            ("check", "check-config"),
            ("xyz", nil), ("de", nil), ("rotate", "rotate"),
        ] as [(String, String?)])
    func nearest(_ typed: String, _ expected: String?) {
        let words = ["enroll", "devices", "revoke", "delete-user", "list", "rotate", "check-config"]
        #expect(NearestWord.nearest(to: typed, among: words) == expected)
    }

    @Test(
        "one duration syntax: seconds, or numbers with s, m, h and d",
        arguments: [
            ("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("2d", 172_800), ("0", 0), ("0s", 0),
            ("1d2h3m4s", 93_784), ("", nil), ("5", 5), ("-5", nil), ("+5", nil), ("5x", nil), ("m", nil),
            ("1h30", nil), ("1.5h", nil), ("99999999999999999999", nil), ("1000001d", nil),
        ] as [(String, Int64?)])
    func duration(_ text: String, _ seconds: Int64?) {
        #expect(DurationText.seconds(text) == seconds)
        if let seconds { #expect(DurationText.seconds(DurationText.text(seconds)) == seconds) }
    }

    @Test("keyauth agent --timeout reads the shared syntax and still refuses zero")
    func agentTimeout() {
        #expect(AgentOptions.seconds(fromDuration: "1h30m") == 5400)
        #expect(AgentOptions.seconds(fromDuration: "0") == nil)
        #expect(AgentOptions.seconds(fromDuration: "0s") == nil)
    }
}
