import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("keyauth-server request log", .timeLimit(.minutes(10)))
struct RequestLogTests {
    /// The JSON objects of the log's request lines (those with a method).
    private func requestLines(_ log: String) throws -> [[String: JSONValue]] {
        try log.split(separator: "\n").filter { $0.hasPrefix("{") }.map { line in
            guard let object = try JSONValue(parsing: String(line)).objectValue else {
                throw TestFailure("not an object: \(line)")
            }
            return object
        }.filter { $0["method"] != nil }
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
        let api = TestAPI(server: server, clock: environment.clock, storage: storage)
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
        // Every line is JSON, serve's own start and stop lines included.
        let all = try log.split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        #expect(
            all.first?["message"]?.stringValue?.hasPrefix("listening on http://127.0.0.1:\(server.port) (") == true)
        #expect(all.first?["level"] == .string("info"))
        #expect(all.last?["message"] == .string("stopped"))
        #expect(all.allSatisfy { $0["time"]?.stringValue?.hasSuffix("Z") == true })
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

    @Test("CIBA and OpenID Connect lines name the client and the user the server established, never claimed ones")
    func clientAndUserOfOpenIDRequests() throws {
        let environment = TestEnvironment()
        let lines = CapturingLog()
        // Over a socket: the browser's requests carry their query in the path, as a browser's do.
        let runner = try ServerRunner(
            configuration: try environment.configuration {
                $0.logRequests = true
                $0.logFormat = .json
                $0.failureLimit = 1000
            }, storage: try environment.openStorage(), log: lines, now: environment.clock.closure)
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let laptop = try ServerTestKeys.key("alice-1")
        let kid = laptop.publicKey.fingerprint
        let device = ApprovingDevice(api: api, key: laptop, token: try api.activeDevice(user: "alice", key: laptop))

        // CIBA: the request, a poll before the answer, the poll that collects the token.
        let desk = try api.addClient()
        let id = try api.startSignIn(desk, user: "alice")
        #expect(try api.poll(desk, id: id).status == 400)
        try device.answerNewest()
        environment.clock.advance(by: 5)
        #expect(try api.poll(desk, id: id).status == 200)
        // Claimed only: a wrong secret, and an unknown user asked for by a real client.
        let impostor = TestClient(id: desk.id, secret: "not-the-secret")
        #expect(try api.backchannelAuthorize(impostor, user: "alice").status == 401)
        #expect(try api.poll(impostor, id: id).status == 401)
        #expect(try api.backchannelAuthorize(desk, user: "mallory").status == 400)

        // OpenID Connect: the code flow, the code grant, UserInfo and RP-Initiated Logout.
        let wiki = try OpenIDTestAPI.addClient(api)
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: api)
        let done = try OpenIDTestAPI.signIn(&browser, device: device, OpenIDTestAPI.authorization(wiki, pkce: pkce))
        let code = try #require(try OpenIDTestAPI.redirect(done).parameters["code"])
        let tokens = try OpenIDTestAPI.redeem(api, wiki, code: code, verifier: pkce.verifier)
        let accessToken = try #require(tokens.json?["access_token"]?.stringValue)
        let idToken = try #require(tokens.json?["id_token"]?.stringValue)
        #expect(try OpenIDTestAPI.userInfo(api, token: accessToken).status == 200)
        #expect(try browser.get("/end-session", query: [("id_token_hint", idToken)]).status == 200)
        // Claimed only: an unregistered client_id, a code redeemed by another client's name.
        #expect(try browser.get("/authorize", query: [("client_id", "no-such-client")]).status == 400)
        let unknown = RelyingParty(id: "no-such-client", secret: nil, redirectURI: wiki.redirectURI)
        #expect(try OpenIDTestAPI.redeem(api, unknown, code: code, verifier: pkce.verifier).status == 401)

        let logged = try lines.lines.map { line in try #require(try JSONValue(parsing: line).objectValue) }
        func line(_ path: String, status: Int, _ index: Int = 0) throws -> [String: JSONValue] {
            let matching = logged.filter { $0["path"] == .string(path) && $0["status"] == .integer(Int64(status)) }
            guard index < matching.count else { throw TestFailure("no line \(index) for \(path) \(status)") }
            return matching[index]
        }
        func names(_ entry: [String: JSONValue]) -> [JSONValue?] { [entry["client_id"], entry["user"], entry["kid"]] }
        let desks: JSONValue = .string(desk.id)
        let wikis: JSONValue = .string(wiki.id)
        #expect(names(try line("/bc-authorize", status: 200)) == [desks, "alice", nil])
        #expect(names(try line("/oauth/token", status: 400, 0)) == [desks, nil, nil])
        #expect(try line("/oauth/token", status: 400, 0)["error"] == "authorization_pending")
        #expect(names(try line("/oauth/token", status: 200, 1)) == [desks, "alice", .string(kid)])
        #expect(names(try line("/bc-authorize", status: 401)) == [nil, nil, nil])
        #expect(names(try line("/oauth/token", status: 401, 0)) == [nil, nil, nil])
        #expect(names(try line("/bc-authorize", status: 400)) == [desks, nil, nil])
        #expect(names(try line("/authorize", status: 200)) == [wikis, nil, nil])
        #expect(names(try line("/authorize/sign-in", status: 200)) == [wikis, nil, nil])
        #expect(names(try line("/authorize/continue", status: 303)) == [wikis, "alice", .string(kid)])
        #expect(names(try line("/oauth/token", status: 200, 2)) == [wikis, "alice", .string(kid)])
        #expect(names(try line("/userinfo", status: 200)) == [wikis, "alice", nil])
        #expect(names(try line("/end-session", status: 200)) == [wikis, "alice", .string(kid)])
        #expect(names(try line("/authorize", status: 400)) == [nil, nil, nil])
        #expect(names(try line("/oauth/token", status: 401, 1)) == [nil, nil, nil])
        // The device's answer is logged under its route's pattern: the request's id is the
        // client's auth_req_id, which no log line holds.
        #expect(try line("/v1/auth-requests/{id}", status: 200)["route"] == "/v1/auth-requests/{id}")
        #expect(!lines.lines.contains { $0.contains(id) })
        // The members' order: client_id after kid, the duration last.
        let continued = try #require(
            lines.lines.first { $0.contains("\"path\":\"/authorize/continue\"") && $0.contains("\"status\":303") })
        #expect(continued.contains("\"kid\":\"\(kid)\",\"client_id\":\"\(wiki.id)\",\"duration_ms\":"))
    }

    @Test("the text format ends a line with client_id=ID when the client is established")
    func clientInTextLines() {
        let lines = CapturingLog()
        lines.request(
            RequestLogEntry(
                client: "192.0.2.1", method: "POST", path: "/oauth/token", route: "/oauth/token", status: 200,
                error: nil, user: "alice", deviceKID: "kid-1", clientID: "desk\nforged", milliseconds: 1.25),
            format: .text, now: 1_800_000_000)
        #expect(
            lines.lines == [
                "2027-01-15T08:00:00Z 192.0.2.1 POST /oauth/token 200 1.3ms route=/oauth/token user=alice kid=kid-1 "
                    + "client_id=desk?forged"
            ])
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
