import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// What anyone can make the server do without credentials, over real sockets from several
/// loopback addresses: sign-in requests that reach users' devices, and what `/authorize` stores.
@Suite("Anonymous requests cannot lock users out, tell names apart, or fill the disk", .timeLimit(.minutes(10)))
struct AnonymousAbuseTests {
    /// A server with alice's active device, a CIBA client, and a way to send from any address.
    private struct Setup {
        let environment = TestEnvironment()
        let runner: ServerRunner
        let token: String
        let laptop: RSAPrivateKey

        init() throws {
            let runner = try environment.startServer { $0.failureLimit = 100_000 }
            let laptop = try ServerTestKeys.key("alice-1")
            token = try environment.socketAPI(runner).activeDevice(user: "alice", key: laptop)
            self.runner = runner
            self.laptop = laptop
        }

        /// The API as seen from `address`.
        func api(from address: String? = nil) -> TestAPI {
            TestAPI(
                transport: SocketTransport(port: runner.port, sourceAddress: address), issuer: runner.issuer,
                clock: environment.clock, storage: runner.storage)
        }

        /// `POST /account/sign-in` for `user` from `address`, with a double-submit CSRF pair.
        func accountSignIn(_ user: String, from address: String) throws -> HTTPResponse {
            let csrf = "Y3NyZi1mb3ItdGhlLWFidXNlLXRlc3RzLTAwMDAwMDA"
            return try api(from: address).send(
                "POST", "/account/sign-in",
                headers: ["Content-Type": "application/x-www-form-urlencoded", "Cookie": "keyauth-csrf=\(csrf)"],
                body: Array("csrf=\(csrf)&user=\(user)".utf8))
        }

        /// Requests of `user` created from `address`, open or not.
        func requests(of user: String, from address: String) throws -> [SignInRequestRecord] {
            try runner.storage.openSignInRequests(user: user, now: .min).filter { $0.requestedFrom == address }
        }
    }

    @Test(
        "one address cannot use up alice's requests: its own start replaces its open one, and alice's browser and clients keep theirs"
    )
    func oneAddressCannotLockOut() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let attacker = "127.0.0.61"
        for _ in 0..<6 {
            let response = try setup.accountSignIn("alice", from: attacker)
            #expect(response.status == 303, "\(response.status) \(response.text)")
        }
        // The attacker's address holds one open request at a time, and made at most 5 in the hour.
        let open = try setup.runner.storage.openSignInRequests(user: "alice", now: setup.environment.clock.now)
        #expect(open.filter { $0.requestedFrom == attacker }.count == 1)
        #expect(try setup.requests(of: "alice", from: attacker).count <= 5)
        // Alice's own browser gets a request a device can approve...
        let own = try setup.accountSignIn("alice", from: "127.0.0.62")
        #expect(own.status == 303)
        let mine = try #require(try setup.requests(of: "alice", from: "127.0.0.62").first)
        #expect(mine.status == .pending && mine.expiresAt > setup.environment.clock.now)
        // ...and so does a registered client.
        let client = try setup.api().addClient()
        #expect(try setup.api(from: "127.0.0.63").backchannelAuthorize(client, user: "alice").status == 200)
    }

    @Test("a user's limits answer exactly as an unknown user name does: the same waiting page, never a 429")
    func limitsTellNoNames() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        // Six starts from each of five addresses exhaust alice's hourly share; the same for a
        // name nobody has.
        var shapes: [String: Set<String>] = [:]
        for user in ["alice", "nobody-here"] {
            for host in 0..<5 {
                for _ in 0..<6 {
                    let response = try setup.accountSignIn(user, from: "127.0.0.\(70 + host)")
                    let page = try setup.api(from: "127.0.0.\(70 + host)").send(
                        "GET", "/account",
                        headers: [
                            "Cookie": response.headers.values(for: "Set-Cookie").compactMap {
                                $0.split(separator: ";").first.map(String.init)
                            }.joined(separator: "; ")
                        ])
                    // What differs from one answer to the next (the code, the tokens) is left out.
                    let shape =
                        "\(response.status) \(response.headers["Location"] ?? "") \(page.status) "
                        + page.text.replacing(/value="[^"]*"|id="binding-code">[^<]*/, with: "").replacing(
                            user, with: "USER")
                    shapes[user, default: []].insert(shape)
                }
            }
        }
        #expect(shapes["alice"]?.count == 1 && shapes["nobody-here"]?.count == 1, "\(shapes)")
        #expect(shapes["alice"] == shapes["nobody-here"])
        #expect(try setup.runner.storage.openSignInRequests(user: "alice", now: .min).count <= 20)
    }

    @Test("every anonymous start counts against its address: past the budget, the same 429 page for any name")
    func startsCountPerAddress() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let flooder = "127.0.0.81"
        var statuses: [Int] = []
        for index in 0..<21 {
            statuses.append(try setup.accountSignIn(index % 2 == 0 ? "alice" : "zed", from: flooder).status)
        }
        #expect(statuses.prefix(20).allSatisfy { $0 == 303 }, "\(statuses)")
        let alice = try setup.accountSignIn("alice", from: flooder)
        let unknown = try setup.accountSignIn("nobody-here", from: flooder)
        #expect(alice.status == 429 && unknown.status == 429)
        #expect(alice.text == unknown.text)
        // Another address is not affected.
        #expect(try setup.accountSignIn("alice", from: "127.0.0.82").status == 303)
    }

    @Test(
        "a client's requested_expiry below a minute is raised to one, so requests cannot expire as fast as they are made"
    )
    func minimumExpiry() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api()
        let client = try api.addClient()
        let started = try api.backchannelAuthorize(client, user: "alice", extra: [("requested_expiry", "1")])
        #expect(started.status == 200)
        #expect(started.json?["expires_in"] == .integer(60))
    }

    @Test("4,000 anonymous GET /authorize from one address store nothing; a user's sign-in still works")
    func authorizeStoresNothing() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api()
        let client = try OpenIDTestAPI.addClient(api)
        let query = OpenIDTestAPI.authorization(client, pkce: try PKCE(), state: String(repeating: "s", count: 1024))
            .map { "\($0.0)=\(TestAPI.formEncode($0.1))" }.joined(separator: "&")
        let database = setup.environment.databasePath
        func size() -> Int {
            ["", "-wal"].reduce(0) { total, suffix in
                total + ((try? FileManager.default.attributesOfItem(atPath: database + suffix)[.size] as? Int) ?? 0)
            }
        }
        // Warm up whatever a first request allocates, then measure.
        _ = try setup.api(from: "127.0.0.91").send("GET", "/authorize?" + query)
        let before = size()
        let connection = try RawHTTPConnection(port: setup.runner.port, sourceAddress: "127.0.0.91")
        let request = Array("GET /authorize?\(query) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        for _ in 0..<4_000 {
            try connection.send(request)
            #expect(try connection.readResponse().status == 200)
        }
        #expect(size() == before, "the database grew from \(before) to \(size()) bytes")
        // The pages still work: a sign-in through the sealed request signs alice in.
        var browser = OpenIDBrowser(api: api)
        let form = try browser.get("/authorize", query: OpenIDTestAPI.authorization(client, pkce: try PKCE()))
        let waiting = try browser.post(
            "/authorize/sign-in",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text)),
                ("authorization", try OpenIDTestAPI.hidden("authorization", in: form.text)), ("user", "alice"),
            ])
        #expect(waiting.status == 200, "\(waiting.text)")
        let id = try #require(try setup.runner.storage.openSignInRequests(user: "alice", now: .min).last?.id)
        let approved = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id), token: setup.token)
        #expect(approved.status == 200, "\(approved.text)")
        let done = try browser.post(
            "/authorize/continue",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text)),
                ("authorization", try OpenIDTestAPI.hidden("authorization", in: form.text)),
            ])
        #expect(try OpenIDTestAPI.redirect(done).parameters["code"] != nil)
    }
}
