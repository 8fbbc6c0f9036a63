import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The settings file's comments and bare boolean keys, and `check-config` walking the parser's
/// own table of settings.
@Suite("keyauth-server settings table, comments and bare keys", .timeLimit(.minutes(5)))
struct SettingsTableTests {
    @Test("a # after a space starts a comment, a # inside a value stays, a bare boolean key is true")
    func commentsAndBareKeys() throws {
        let directory = TemporaryDirectory("keyauth-settings-table")
        defer { directory.remove() }
        let path = directory.path + "/server.conf"
        let text = """
            listen = 127.0.0.1:8080  # the public port
            db = /srv/keyauth#1/ka.db\t# a path with a #
            trust-proxy
            quiet # no request lines
            dpop-nonce\t#
            """
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
        guard
            case .serve(let configuration) = try ServerCommand.parse(
                arguments: ["--config", path], environment: [:], defaultSettingsFile: nil)
        else { throw TestFailure("not serve") }
        #expect(configuration.listen.description == "127.0.0.1:8080")
        #expect(configuration.database == "/srv/keyauth#1/ka.db")
        #expect(configuration.trustProxy)
        #expect(configuration.logRequests == false)
        #expect(configuration.dpopNonce)
    }

    @Test("check-config prints every setting of the parser's table, and the table has every serve option of --help")
    func checkConfigWalksTheTable() throws {
        let output = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["check-config", "--config", "/dev/null"], environment: [:], output: output.output) == 0)
        let lines = output.standard.split(separator: "\n")
        let keys = ServerCommand.serveSettings.map(\.key)
        #expect(Set(keys).count == keys.count)
        for key in keys {
            #expect(lines.contains { $0.hasPrefix("\(key) = ") || $0.hasPrefix("#\(key) =") }, "\(key)")
        }
        // Each a line of its own, in the table's order, and nothing else but the two comments.
        #expect(lines.count == keys.count + 2)
        for key in ["dpop", "dpop-nonce", "token-alg", "cleanup-interval"] {
            #expect(lines.contains { $0.hasPrefix("\(key) = ") }, "\(key)")
        }
        #expect(lines.contains { $0.hasPrefix("cleanup-interval = 1m ") })
        let helpOptions = Set(
            ServerCommand.serveOptions.split(separator: "\n").compactMap { line in
                line.firstMatch(of: /^  --([a-z][a-z0-9-]*)/).map { String($0.output.1) }
            })
        #expect(helpOptions.subtracting(["config"]) == Set(keys))
    }
}
