import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `keyauth-server COMMAND --help`, `help COMMAND` and the suggestion after an unknown command.
@Suite("keyauth-server help pages and unknown commands", .timeLimit(.minutes(5)))
struct ServerHelpTests {
    private func run(_ arguments: [String]) -> (status: Int32, standard: String, error: String) {
        let output = CapturedOutput()
        let status = ServerCommand.main(arguments: arguments, environment: [:], output: output.output)
        return (status, output.standard, output.error)
    }

    /// The `--name` words of a text.
    private func options(in text: String) -> Set<String> {
        Set(text.matches(of: /--[a-z][a-z0-9-]*/).map { String($0.output) })
    }

    @Test("each command has its own page, naming only options the whole text names", arguments: ServerCommand.verbs)
    func commandPages(_ verb: String) {
        let whole = run(["--help"]).standard
        let page = run([verb, "--help"])
        #expect(page.status == 0)
        #expect(page.error.isEmpty)
        #expect(
            page.standard.hasPrefix(verb == "serve" ? "usage: keyauth-server [serve]" : "usage: keyauth-server \(verb)")
        )
        #expect(page.standard != whole)
        #expect(run(["help", verb]).standard == page.standard)
        #expect(run([verb, "-h"]).standard == page.standard)
        // The man page is made from the whole text: whatever a page names must be there.
        #expect(options(in: page.standard).subtracting(options(in: whole)).isEmpty, "\(verb)")
        if verb != "check-config" { #expect(page.standard.contains("-h, --help")) }
        if !["serve", "check-config"].contains(verb) {
            #expect(page.standard.split(separator: "\n").count < 40, "\(verb)")
            #expect(page.standard.contains("--db PATH"))
        }
    }

    @Test("a command's page names the options that command takes")
    func pageOptions() {
        #expect(
            options(in: run(["devices", "--help"]).standard).isSuperset(of: ["--user", "--status", "--json", "--db"]))
        #expect(
            options(in: run(["keys", "--help"]).standard).isSuperset(of: ["--alg", "--delay", "--token-lifetime"]))
        #expect(options(in: run(["audit", "--help"]).standard).contains("--since"))
        #expect(options(in: run(["clients", "--help"]).standard).contains("--redirect-uri"))
        #expect(options(in: run(["serve", "--help"]).standard).isSuperset(of: ["--listen", "--cleanup-interval"]))
        #expect(!run(["serve", "--help"]).standard.contains("delete-user"))
    }

    @Test("--help alone, help alone and options before --help print the whole text")
    func wholeText() {
        let whole = run(["--help"])
        #expect(whole.status == 0)
        #expect(whole.standard == ServerCommand.helpText)
        #expect(run(["help"]).standard == whole.standard)
        #expect(run(["--listen", "127.0.0.1:0", "-h"]).standard == whole.standard)
    }

    @Test(
        "an unknown command is a usage error that suggests the nearest command",
        arguments: [
            (["enrol", "alice"], "unknown command enrol; did you mean enroll? see keyauth-server --help"),
            (["devcies"], "unknown command devcies; did you mean devices? see keyauth-server --help"),
            (["help", "revok"], "unknown command revok; did you mean revoke? see keyauth-server --help"),
            (["check", "--help"], "unknown command check; did you mean check-config? see keyauth-server --help"),
            (["frobnicate"], "unknown command frobnicate; see keyauth-server --help"),
            (["keys", "rotat"], "keys: unknown action rotat; expected list or rotate; did you mean rotate?"),
            (["codes", "lst"], "codes: expected list, or revoke USER; did you mean list?"),
        ])
    func unknownCommand(_ arguments: [String], _ message: String) {
        let result = run(arguments)
        #expect(result.status == 64)
        #expect(result.error == "keyauth-server: \(message)\n")
        #expect(result.standard.isEmpty)
    }

    @Test("the built binary prints a command's page")
    func binary() throws {
        let page = try KeyAuthServerProcess.runCommand(["keys", "--help"])
        #expect(page.status == 0)
        #expect(page.output == ServerCommand.helpPage(for: "keys"))
        let wrong = try KeyAuthServerProcess.runCommand(["key", "list"])
        #expect(wrong.status == 64)
        #expect(wrong.error == "keyauth-server: unknown command key; did you mean keys? see keyauth-server --help\n")
    }
}
