import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("keyauth-server request log", .timeLimit(.minutes(10)))
struct RequestLogTests {
    /// The JSON objects of the log's request lines.
    private func requestLines(_ log: String) throws -> [[String: JSONValue]] {
        try log.split(separator: "\n").filter { $0.hasPrefix("{") }.map { line in
            guard let object = try JSONValue(parsing: String(line)).objectValue else {
                throw TestFailure("not an object: \(line)")
            }
            return object
        }
    }

    @Test("the built binary logs JSON lines with the proxied client, user and kid, and no assertion or token")
    func binaryJSONLog() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let server = try KeyAuthServerProcess(
            name: "log",
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", environment.databasePath, "--enrollment", "open",
                "--metrics-listen", "off", "--log-format", "json", "--trust-proxy",
            ], logPath: environment.directory.path + "/server.log")
        defer { server.terminate() }
        try server.waitUntilListening()
        let storage = try StorageFactory.open(environment.databasePath, creatingIfMissing: false)
        defer { storage.close() }
        let api = TestAPI(
            transport: SocketTransport(port: server.port), issuer: server.url, clock: environment.clock,
            storage: storage)
        let key = try ServerTestKeys.key("alice-1")
        let kid = key.publicKey.fingerprint
        #expect(try api.register(user: "alice", key: key).status == 201)

        let assertion = try api.assertion(key)
        let proxied: HTTPHeaders = [
            "Content-Type": "application/x-www-form-urlencoded", "X-Forwarded-For": "203.0.113.5, 198.51.100.7",
        ]
        let form = "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(assertion))"
        let login = try api.send("POST", "/oauth/token", headers: proxied, body: Array(form.utf8))
        #expect(login.status == 200)
        let token = try #require(login.json?["access_token"]?.stringValue)
        let refused = try api.send(
            "POST", "/oauth/token", headers: proxied,
            body: Array("grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(assertion)".utf8))
        #expect(refused.status == 400)
        #expect(server.terminate() == 0)

        let log = server.log
        let lines = try requestLines(log)
        #expect(lines.count == 3)
        let success = try #require(lines.first { $0["status"] == .integer(200) })
        #expect(success["client"] == .string("198.51.100.7"))
        #expect(success["method"] == .string("POST"))
        #expect(success["path"] == .string("/oauth/token"))
        #expect(success["route"] == .string("/oauth/token"))
        #expect(success["user"] == .string("alice"))
        #expect(success["kid"] == .string(kid))
        #expect(success["error"] == nil)
        guard case .number(let milliseconds) = success["duration_ms"] else {
            throw TestFailure("duration_ms is not a number: \(String(describing: success["duration_ms"]))")
        }
        #expect(milliseconds >= 0)
        #expect(success["time"]?.stringValue?.hasSuffix("Z") == true)
        // The replayed assertion: refused, with its OAuth code, and no user or key named.
        let replay = try #require(lines.first { $0["status"] == .integer(400) })
        #expect(replay["error"] == .string("invalid_grant"))
        #expect(replay["user"] == nil)
        #expect(replay["kid"] == nil)
        // Neither the assertion nor the token, nor any of their parts, is anywhere in the log.
        for secret in [assertion, token] {
            for part in secret.split(separator: ".") where part.count > 16 {
                #expect(!log.contains(part), "the log holds part of a secret: \(part.prefix(16))...")
            }
        }
    }

    @Test("--log-format takes text or json, from a flag, a variable or the settings file")
    func logFormatSetting() throws {
        #expect(try serveConfiguration([]).logFormat == .text)
        #expect(try serveConfiguration(["--log-format", "json"]).logFormat == .json)
        #expect(try serveConfiguration([], ["KEYAUTH_SERVER_LOG_FORMAT": "json"]).logFormat == .json)
        #expect(throws: ServerConfigurationError("--log-format: expected text or json, got xml")) {
            _ = try serveConfiguration(["--log-format", "xml"])
        }
    }

    @Test("an internal failure is one JSON line with level error when the format is json")
    func errorLine() throws {
        let lines = CapturingLog()
        lines.error("cleanup failed: disk I/O error\nsecond line", format: .json, now: 1_800_000_000)
        lines.error("cleanup failed: disk I/O error\nsecond line", format: .text, now: 1_800_000_000)
        #expect(
            lines.lines == [
                #"{"time":"2027-01-15T08:00:00Z","level":"error","message":"cleanup failed: disk I/O error\nsecond line"}"#,
                "2027-01-15T08:00:00Z error: cleanup failed: disk I/O error?second line",
            ])
    }
}
