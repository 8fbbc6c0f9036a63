import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("keyauth-server settings file and check-config", .timeLimit(.minutes(10)))
struct SettingsFileTests {
    /// A settings file with `text` in a fresh directory; the directory is removed by the caller.
    private func settingsFile(_ text: String) -> (TemporaryDirectory, String) {
        let directory = TemporaryDirectory("keyauth-settings")
        let path = directory.path + "/server.conf"
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
        return (directory, path)
    }

    private func serve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ServerConfiguration {
        guard
            case .serve(let configuration) = try ServerCommand.parse(
                arguments: arguments, environment: environment, defaultSettingsFile: nil)
        else { throw TestFailure("not serve") }
        return configuration
    }

    @Test("a flag wins over its variable, which wins over the file, which wins over the default")
    func precedence() throws {
        let (directory, path) = settingsFile(
            """
            # comment, then a blank line

              listen = 127.0.0.1:9100
            rate-limit=7
            token-lifetime = 300\r
            trust-proxy = yes
            db = /var/lib/keyauth/from-file.db
            """)
        defer { directory.remove() }
        let fromFile = try serve(["--config", path])
        #expect(fromFile.listen.description == "127.0.0.1:9100")
        #expect(fromFile.failureLimit == 7)
        #expect(fromFile.accessTokenLifetime == 300)
        #expect(fromFile.trustProxy)
        #expect(fromFile.database == "/var/lib/keyauth/from-file.db")
        #expect(fromFile.registrationLimit == 20)

        let environment = ["KEYAUTH_SERVER_RATE_LIMIT": "8", "KEYAUTH_SERVER_LISTEN": "127.0.0.1:9200"]
        let overridden = try serve(
            ["--config", path, "--listen", "127.0.0.1:9300", "--trust-proxy=false"], environment)
        #expect(overridden.listen.description == "127.0.0.1:9300")
        #expect(overridden.failureLimit == 8)
        #expect(overridden.trustProxy == false)
        #expect(overridden.accessTokenLifetime == 300)

        // KEYAUTH_SERVER_CONFIG names the file too, and the default file is read when it exists.
        #expect(try serve([], ["KEYAUTH_SERVER_CONFIG": path]).failureLimit == 7)
        guard
            case .serve(let byDefault) = try ServerCommand.parse(
                arguments: [], environment: [:], defaultSettingsFile: path)
        else { throw TestFailure("not serve") }
        #expect(byDefault.failureLimit == 7)
        guard
            case .serve(let withoutFile) = try ServerCommand.parse(
                arguments: [], environment: [:], defaultSettingsFile: directory.path + "/absent.conf")
        else { throw TestFailure("not serve") }
        #expect(withoutFile.failureLimit == 10)
    }

    @Test(
        "an unknown key (with the nearest known one), a bad value or a bad line is refused with exit 78 and the file's line",
        arguments: [
            ("listen = 127.0.0.1:8088\nlisen = 127.0.0.1:8089\n", ":2: unknown key lisen; did you mean listen?"),
            ("\n\nrate-limit = 0\n", ":3: rate-limit: expected a number from 1 to 100000, got 0"),
            ("listen = nowhere\n", ":1: listen: expected HOST:PORT, got nowhere"),
            ("trust-proxy = maybe\n", ":1: trust-proxy: expected true or false, got maybe"),
            ("listen\n", ":1: expected key = value (only a true/false key may stand alone)"),
            ("listen = # no value\n", ":1: listen has no value"),
            ("issuer =\n", ":1: issuer has no value"),
            ("db = a.db\ndb = b.db\n", ":2: db is already set on line 1"),
            ("config = /etc/other.conf\n", ":1: unknown key config"),
        ])
    func refused(_ text: String, _ expected: String) {
        let (directory, path) = settingsFile(text)
        defer { directory.remove() }
        for verb in ["serve", "check-config"] {
            let output = CapturedOutput()
            let status = ServerCommand.main(
                arguments: [verb, "--config", path], environment: [:], output: output.output)
            #expect(status == 78)
            #expect(
                output.error == "keyauth-server: \(path)\(expected)"
                    + (expected.hasSuffix("?")
                        ? " see keyauth-server --help\n"
                        : expected.contains("unknown key") ? "; see keyauth-server --help\n" : "\n"))
        }
    }

    @Test("a missing settings file named by --config is exit 78; a bad flag stays exit 64")
    func missingFile() {
        let output = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["--config", "/nonexistent/server.conf"], environment: [:], output: output.output)
                == 78)
        #expect(output.error.hasPrefix("keyauth-server: /nonexistent/server.conf: cannot read the settings file"))
        let flag = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: ["check-config", "--config", "/dev/null", "--rate-limit", "0"], environment: [:],
                output: flag.output) == 64)
        #expect(flag.error == "keyauth-server: --rate-limit: expected a number from 1 to 100000, got 0\n")
    }

    @Test("check-config prints every setting, where it came from, and masks a database password")
    func checkConfig() throws {
        let (directory, path) = settingsFile(
            "db = postgres://keyauth:s3cret-pw@db.example:5432/keyauth\nenrollment = open\n")
        defer { directory.remove() }
        let output = CapturedOutput()
        let status = ServerCommand.main(
            arguments: ["check-config", "--config", path, "--rate-limit", "5"],
            environment: ["KEYAUTH_SERVER_ISSUER": "https://auth.example"], output: output.output)
        #expect(status == 0)
        let lines = output.standard.split(separator: "\n").map(String.init)
        func line(_ key: String) -> String {
            lines.first { $0.hasPrefix(key + " = ") || $0.hasPrefix("#" + key + " =") } ?? ""
        }
        #expect(!output.standard.contains("s3cret-pw"))
        #expect(line("db").hasPrefix("db = postgres://keyauth:***@db.example:5432/keyauth "))
        #expect(line("db").hasSuffix("# \(path):1: db"))
        #expect(line("enrollment").hasSuffix("# \(path):2: enrollment"))
        #expect(line("rate-limit").hasPrefix("rate-limit = 5 "))
        #expect(line("rate-limit").hasSuffix("# --rate-limit"))
        #expect(line("issuer").hasSuffix("# KEYAUTH_SERVER_ISSUER"))
        #expect(line("listen").hasPrefix("listen = 127.0.0.1:8088 "))
        #expect(line("listen").hasSuffix("# default"))
        #expect(line("threads").hasPrefix("threads = 32 "))
        #expect(line("db-connections").hasPrefix("db-connections = 4 "))
        #expect(line("signing-key-file").hasSuffix("# not set"))
        #expect(lines.contains("# settings file: \(path)"))
        // Every option of --help but --config, --help and --version has a line.
        for option in ["listen", "issuer", "db", "enrollment", "metrics-listen", "trust-proxy", "quiet", "threads"] {
            #expect(!line(option).isEmpty, "\(option)")
        }
    }

    @Test("the built binary serves with the settings of --config and refuses a bad line with exit 78")
    func binary() throws {
        let environment = TestEnvironment()
        let path = environment.directory.path + "/server.conf"
        FileManager.default.createFile(
            atPath: path,
            contents: Data(
                "listen = 127.0.0.1:0\nmetrics-listen = off\ndb = \(environment.databasePath)\nquiet = true\n".utf8))
        let server = try KeyAuthServerProcess(
            name: "settings", arguments: ["serve", "--config", path], logPath: environment.directory.path + "/log")
        try server.waitUntilListening()
        #expect(server.log.contains("storage \(environment.databasePath)"))
        #expect(server.log.contains("metrics off"))
        #expect(server.terminate() == 0)

        FileManager.default.createFile(atPath: path, contents: Data("listen = 127.0.0.1:0\nport = 8088\n".utf8))
        let refused = try KeyAuthServerProcess.runCommand(["serve", "--config", path])
        #expect(refused.status == 78)
        #expect(refused.error == "keyauth-server: \(path):2: unknown key port; see keyauth-server --help\n")
    }
}
