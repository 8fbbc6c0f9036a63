import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// Every duration option of `keyauth-server` reads one syntax: `90`, `90s`, `5m`, `1h30m`, `2d`.
@Suite("keyauth-server duration options", .timeLimit(.minutes(5)))
struct DurationOptionTests {
    private func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws
        -> ServerCommand.Action
    {
        try ServerCommand.parse(arguments: arguments, environment: environment, defaultSettingsFile: nil)
    }

    private func serve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ServerConfiguration {
        guard case .serve(let configuration) = try parse(arguments, environment) else { throw TestFailure("not serve") }
        return configuration
    }

    @Test("serve's duration options take seconds or units, from flags, variables and the file")
    func serveDurations() throws {
        let configuration = try serve([
            "--token-lifetime", "1h30m", "--cleanup-interval", "5m", "--request-timeout", "90s",
            "--connection-timeout", "30",
        ])
        #expect(configuration.accessTokenLifetime == 5400)
        #expect(configuration.cleanupIntervalSeconds == 300)
        #expect(configuration.requestTimeoutSeconds == 90)
        #expect(configuration.connectionTimeoutSeconds == 30)
        #expect(try serve([], ["KEYAUTH_SERVER_TOKEN_LIFETIME": "1d"]).accessTokenLifetime == 86_400)
        #expect(try serve([]).offlineGrantLifetime == 604_800)
        #expect(try serve(["--offline-grant-lifetime", "2d"]).offlineGrantLifetime == 172_800)

        let directory = TemporaryDirectory("keyauth-durations")
        defer { directory.remove() }
        let path = directory.path + "/server.conf"
        FileManager.default.createFile(atPath: path, contents: Data("cleanup-interval = 2m\n".utf8))
        #expect(try serve(["--config", path]).cleanupIntervalSeconds == 120)
        FileManager.default.createFile(atPath: path, contents: Data("cleanup-interval = 2 minutes\n".utf8))
        #expect(
            throws: ServerConfigurationError(
                "\(path):1: cleanup-interval: expected a duration from 1s to 1h (90, 90s, 5m, 1h30m, 2d), got 2 minutes",
                status: 78)
        ) { try serve(["--config", path]) }
    }

    @Test("keys rotate --delay, keys --token-lifetime and audit --since take the same syntax")
    func commandDurations() throws {
        guard
            case .keys(.rotate(_, let delay, _), let options) = try parse(
                ["keys", "rotate", "--delay", "1h30m", "--token-lifetime", "30m"])
        else { throw TestFailure("not keys rotate") }
        #expect(delay == 5400)
        #expect(options.tokenLifetime == 1800)
        guard case .audit(let since, _, _) = try parse(["audit", "--since", "1h30m"]) else {
            throw TestFailure("not audit")
        }
        #expect(since == .ago(5400))
        guard case .audit(let plain, _, _) = try parse(["audit", "--since", "90"]) else {
            throw TestFailure("not audit")
        }
        #expect(plain == .ago(90))
    }

    @Test(
        "a bad duration is a usage error naming the option and the forms",
        arguments: [
            (
                ["keys", "rotate", "--delay", "5x"],
                "--delay: expected a duration from 0s to 1d (90, 90s, 5m, 1h30m, 2d), got 5x"
            ),
            (
                ["keys", "rotate", "--delay", "2d"],
                "--delay: expected a duration from 0s to 1d (90, 90s, 5m, 1h30m, 2d), got 2d"
            ),
            (
                ["--offline-grant-lifetime", "31d"],
                "--offline-grant-lifetime: expected a duration from 1h to 30d (90, 90s, 5m, 1h30m, 2d), got 31d"
            ),
            (
                ["--token-lifetime", "30s"],
                "--token-lifetime: expected a duration from 1m to 1d (90, 90s, 5m, 1h30m, 2d), got 30s"
            ),
            (
                ["--request-timeout", "-1"],
                "--request-timeout: expected a duration from 1s to 1h (90, 90s, 5m, 1h30m, 2d), got -1"
            ),
        ])
    func badDuration(_ arguments: [String], _ message: String) {
        let output = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: arguments + ["--config", "/dev/null"], environment: [:], output: output.output) == 64)
        #expect(output.error == "keyauth-server: \(message)\n")
    }
}
