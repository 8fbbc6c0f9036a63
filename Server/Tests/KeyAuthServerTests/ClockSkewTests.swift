import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// Two `keyauth-server` instances on one PostgreSQL database whose clocks differ: `B` runs
    /// under libfaketime, a few seconds ahead of or behind `A` and the database. Whatever one
    /// instance accepted, the other must refuse to accept again, although each judges expiry by
    /// its own clock and either may purge the shared replay cache. Nested in
    /// ``StorageContractTests`` to share its `.serialized` trait; skipped, saying why, without
    /// PostgreSQL or libfaketime (failed instead under `KEYAUTH_TEST_REQUIRE_TOOLS=1`).
    @Suite("Clock skew: two keyauth-server instances on one PostgreSQL database", .timeLimit(.minutes(10)))
    struct ClockSkewTests {
        static let faketime = SettableClock.library
        static let hasFaketime = SettableClock.isInstalled
        static let issuer = "http://keyauth.test"
        /// A cleanup every second, so that the instance ahead purges as soon as it may.
        static let arguments = ["--metrics-listen", "off", "--cleanup-interval", "1s", "--dpop-nonce"]

        /// libfaketime's settings for a process `seconds` off the real clock (monotonic clocks
        /// left alone, so that timeouts stay real).
        static func skewed(by seconds: Int) -> [String: String] {
            [
                "LD_PRELOAD": faketime, "FAKETIME": (seconds < 0 ? "" : "+") + "\(seconds)s",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            ]
        }

        @Test(
            "B 5 s ahead: logins and tokens work at both, and nothing either accepted is accepted again at A",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set; run .ci/postgres.sh"),
            .enabled(
                if: ExternalTools.shouldRun(installed: hasFaketime),
                "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
        func ahead() throws {
            try Self.replayAcrossSkew(seconds: 5)
        }

        @Test(
            "B 5 s behind: logins and tokens work at both, and nothing either accepted is accepted again at B",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set; run .ci/postgres.sh"),
            .enabled(
                if: ExternalTools.shouldRun(installed: hasFaketime),
                "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
        func behind() throws {
            try Self.replayAcrossSkew(seconds: -5)
        }

        @Test(
            "a server 60 s ahead of or behind the database refuses to start, saying by how much",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set; run .ci/postgres.sh"),
            .enabled(
                if: ExternalTools.shouldRun(installed: hasFaketime),
                "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"),
            arguments: [60, -60])
        func farOff(_ seconds: Int) throws {
            try #require(Self.hasFaketime, "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)")
            let database = try PostgresTestServer.makeDatabase(url: try #require(PostgresTestServer.url))
            defer { database.destroy() }
            let directory = TemporaryDirectory("keyauth-skew")
            defer { directory.remove() }
            let server = try KeyAuthServerProcess(
                name: "skewed", database: try #require(database.url), issuer: Self.issuer,
                logPath: directory.path + "/server.log", extraArguments: Self.arguments,
                extraEnvironment: Self.skewed(by: seconds))
            defer { _ = server.terminate() }
            #expect(server.waitUntilExit() == 1, "\(server.log)")
            let direction = seconds > 0 ? "ahead of" : "behind"
            #expect(server.log.contains("s \(direction) the database's, more than the 10 s leeway"), "\(server.log)")
            #expect(!server.log.contains("listening on"), "\(server.log)")
        }

        @Test(
            "a server whose clock goes 70 s wrong while it serves fails /healthz, refuses logins and keeps the shared claims",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set; run .ci/postgres.sh"),
            .enabled(
                if: ExternalTools.shouldRun(installed: hasFaketime),
                "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
        func driftWhileServing() throws {
            try Self.withSettableClock(name: "drifting", cleanupInterval: "1s") {
                server, port, api, storage, setClock in
                let laptop = try ServerTestKeys.key("alice-1")
                // A claim another instance, on time, still needs for 5 s, plus the purge margin.
                let now = ServerClock.now()
                #expect(try storage.claimJTI(keyID: "instance-on-time", jti: "still-needed", expiresAt: now + 5))

                // 70 s ahead: past the purge margin (60 s), so that a purge by this clock would
                // take the claim above while an instance on time still accepts its token.
                try setClock("+70s")
                // A cleanup every second reads the database's clock again.
                #expect(
                    server.logEventuallyContains("s ahead of the database's, more than the 10 s leeway", timeout: 20),
                    "\(server.log)")
                let failing = try Self.health(port)
                #expect(failing.status == 503)
                #expect(String(decoding: failing.body, as: UTF8.self).contains(#""check":"clock""#))
                // Logins are refused, not judged by a clock the instance knows to be wrong.
                let refused = try api.login(laptop)
                #expect(refused.status == 503, "\(refused.text)")
                #expect(refused.errorCode == "temporarily_unavailable", "\(refused.text)")
                #expect(refused.headers["Retry-After"] != nil, "\(refused.headers)")
                // Two more cleanups: the shared claim is still there (a second claim fails).
                sleep(2)
                #expect(
                    try !storage.claimJTI(keyID: "instance-on-time", jti: "still-needed", expiresAt: now + 5),
                    "the instance ahead purged a claim by its own clock")

                try setClock("+0s")
                #expect(
                    server.logEventuallyContains("/healthz passes the clock check again", timeout: 20), "\(server.log)")
                #expect(try Self.health(port).status == 200)
                #expect(try api.login(laptop).status == 200)
            }
        }

        @Test(
            "a server whose clock is set between two comparisons refuses the next request and compares at once",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set; run .ci/postgres.sh"),
            .enabled(
                if: ExternalTools.shouldRun(installed: hasFaketime),
                "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
        func stepBetweenCleanups() throws {
            // A cleanup once an hour: only the step itself can make the server compare again.
            try Self.withSettableClock(name: "stepping", cleanupInterval: "1h") { server, port, api, _, setClock in
                let laptop = try ServerTestKeys.key("alice-1")
                #expect(try api.login(laptop).status == 200)

                try setClock("+70s")
                // The very next request: refused, not judged by the clock (before, 400: expired).
                let refused = try api.login(laptop)
                #expect(refused.status == 503, "\(refused.text)")
                #expect(refused.errorCode == "temporarily_unavailable", "\(refused.text)")
                #expect(
                    server.logEventuallyContains("the wall clock was set 70 s forward", timeout: 10), "\(server.log)")
                // The comparison it asked for, long before the next cleanup.
                #expect(
                    server.logEventuallyContains("s ahead of the database's, more than the 10 s leeway", timeout: 10),
                    "\(server.log)")
                #expect(try Self.health(port).status == 503)

                try setClock("+0s")
                _ = try api.login(laptop)  // sees the step back, and has the clocks compared again
                #expect(
                    server.logEventuallyContains("/healthz passes the clock check again", timeout: 10), "\(server.log)")
                #expect(try api.login(laptop).status == 200)
                #expect(try Self.health(port).status == 200)
            }
        }

        /// Runs `body` with a server on a fresh PostgreSQL database under libfaketime, whose
        /// clock offset (`"+70s"`) the last argument sets while it runs (libfaketime reads the
        /// offset file at every clock reading), and alice's device registered through the API.
        static func withSettableClock(
            name: String, cleanupInterval: String,
            _ body: (KeyAuthServerProcess, UInt16, TestAPI, PostgresStorage, (String) throws -> Void) throws -> Void
        ) throws {
            try #require(hasFaketime, "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)")
            let database = try PostgresTestServer.makeDatabase(url: try #require(PostgresTestServer.url))
            defer { database.destroy() }
            let url = try #require(database.url)
            let directory = TemporaryDirectory("keyauth-\(name)")
            defer { directory.remove() }
            let clock = try SettableClock(in: directory.path)
            let server = try KeyAuthServerProcess(
                name: name, database: url, issuer: issuer, logPath: directory.path + "/server.log",
                extraArguments: ["--metrics-listen", "off", "--cleanup-interval", cleanupInterval],
                extraEnvironment: clock.environment)
            defer { _ = server.terminate() }
            let port = try server.waitUntilListening()
            #expect(try health(port).status == 200, "\(server.log)")
            let storage = try PostgresStorage(url: url)
            defer { storage.close() }
            let api = TestAPI(
                transport: SocketTransport(port: port), issuer: issuer,
                clock: TestEnvironment(clockStart: ServerClock.now()).clock, storage: storage)
            _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
            try body(server, port, api, storage, clock.set)
        }

        /// `GET /healthz` on a new connection to `port`.
        static func health(_ port: UInt16) throws -> RawHTTPResponse {
            let connection = try RawHTTPConnection(port: port)
            try connection.send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz"))
            return try connection.readResponse()
        }

        /// `B` runs `seconds` off `A`'s clock. An assertion accepted with its expiry close is
        /// offered again at the instance behind just before that instance would call it expired,
        /// after the instance ahead has had time to purge its replay-cache entry.
        static func replayAcrossSkew(seconds: Int) throws {
            try #require(hasFaketime, "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)")
            try PostgresTestServer.withServerProcesses(
                issuer: issuer, extraArguments: arguments, environmentOfB: skewed(by: seconds)
            ) { servers, url in
                let storage = try PostgresStorage(url: url)
                defer { storage.close() }
                let environment = TestEnvironment(clockStart: ServerClock.now())
                let apis = servers.map {
                    TestAPI(
                        transport: SocketTransport(port: $0.port), issuer: issuer, clock: environment.clock,
                        storage: storage)
                }
                let (first, second) = (apis[0], apis[1])
                let laptop = try ServerTestKeys.key("alice-1")
                let direction = seconds > 0 ? "ahead of" : "behind"
                #expect(
                    servers[1].log.contains("warning: this server's clock is") && servers[1].log.contains(direction),
                    "B's start: \(servers[1].log)")
                #expect(!servers[0].log.contains("clock"), "A's start: \(servers[0].log)")
                let tokenOfA = try first.activeDevice(user: "alice", key: laptop)
                let tokenOfB = try second.accessToken(laptop)
                // B's clock is off by `seconds`: its tokens say so (else the test proves nothing).
                let issued = try [tokenOfA, tokenOfB].map { try #require(try Self.issuedAt($0)) }
                // Within 2 s: the two logins are separate requests, and a loaded machine may take a
                // second between them.
                #expect(abs(issued[1] - issued[0] - Int64(seconds)) <= 2, "B's iat \(issued), faketime not in effect?")
                // Each instance takes the other's token; an assertion used at one is refused at the other.
                #expect(try second.authorized("GET", "/v1/devices", token: tokenOfA).status == 200)
                #expect(try first.authorized("GET", "/v1/devices", token: tokenOfB).status == 200)
                let assertion = try first.assertion(laptop)
                #expect(try first.login(assertion: assertion).status == 200)
                let again = try second.login(assertion: assertion)
                #expect(
                    again.status == 400 && again.errorDescription?.contains("already used") == true, "\(again.text)")

                try Self.crossInstanceFlows(first, second, laptop: laptop, tokens: (tokenOfA, tokenOfB))
                try Self.rotationAcrossSkew(first, second, laptop: laptop, database: url, environment: environment)

                // An assertion accepted at the instance ahead, with its expiry 5 s away.
                let now = ServerClock.now()
                let late = try first.assertion(laptop, claims: ["iat": .integer(now - 25), "exp": .integer(now + 5)])
                let (aheadAPI, behindAPI) = seconds > 0 ? (second, first) : (first, second)
                #expect(try aheadAPI.login(assertion: late).status == 200)
                // Until its exp + leeway by its own clock the instance behind takes it, the
                // instance ahead purges at that time by its clock: wait until the one ahead is 2 s
                // past it and the one behind still 3 s before (room for a slow request), and offer
                // it again behind.
                let aheadOffset = Int64(max(seconds, 0))
                let replayAt = now + 5 + DeviceAssertionVerifier.leeway + 2 - aheadOffset
                while ServerClock.now() < replayAt { usleep(200_000) }
                let replayed = try behindAPI.login(assertion: late)
                #expect(replayed.status == 400, "accepted twice across \(seconds) s of skew: \(replayed.text)")
                #expect(replayed.errorDescription?.contains("already used") == true, "\(replayed.text)")
            }
        }

        /// What one instance starts and the other answers: a sign-in request (CIBA) asked at `A`,
        /// approved at `B` and polled at `A`; an authorization code issued at `B`, redeemed at `A`
        /// and refused at `B`; a pending device registered at `A` and approved at `B`; a DPoP
        /// proof carrying `B`'s nonce (`--dpop-nonce`) accepted at `A` and refused at `B`.
        static func crossInstanceFlows(
            _ first: TestAPI, _ second: TestAPI, laptop: RSAPrivateKey, tokens: (String, String)
        ) throws {
            let desk = try first.addClient()
            let started = try first.backchannelAuthorize(desk, user: "alice", extra: [("binding_message", "AB12")])
            let requestID = try #require(started.json?["auth_req_id"]?.stringValue, "\(started.text)")
            try ApprovingDevice(api: second, key: laptop, token: tokens.1).answerNewest()
            let polled = try first.poll(desk, id: requestID)
            #expect(polled.status == 200 && polled.json?["access_token"] != nil, "CIBA across: \(polled.text)")

            let client = try OpenIDTestAPI.addClient(first)
            let pkce = try PKCE()
            var browser = OpenIDBrowser(api: second)
            let done = try OpenIDTestAPI.signIn(
                &browser, device: ApprovingDevice(api: first, key: laptop, token: tokens.0),
                OpenIDTestAPI.authorization(client, pkce: pkce))
            let code = try #require(try OpenIDTestAPI.redirect(done).parameters["code"])
            let redeemed = try OpenIDTestAPI.redeem(first, client, code: code, verifier: pkce.verifier)
            #expect(redeemed.status == 200, "a code of B at A: \(redeemed.text)")
            let again = try OpenIDTestAPI.redeem(second, client, code: code, verifier: pkce.verifier)
            #expect(again.status == 400 && again.errorCode == "invalid_grant", "the code again at B: \(again.text)")

            let phone = try ServerTestKeys.key("alice-2")
            #expect(try first.register(user: "alice", key: phone).status == 202)
            let approved = try second.approveDevice(phone.publicKey.fingerprint, approver: laptop, token: tokens.1)
            #expect(approved.status == 200, "a device of A approved at B: \(approved.text)")
            #expect(try second.login(phone).status == 200)

            // DPoP under --dpop-nonce: B's nonce in a proof accepted at A; the proof again at B.
            func bound(_ api: TestAPI, proof: String) throws -> HTTPResponse {
                try api.send(
                    "POST", "/oauth/token",
                    headers: ["Content-Type": "application/x-www-form-urlencoded", "DPoP": proof],
                    body: Array(
                        "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try api.assertion(laptop)))"
                            .utf8))
            }
            let builder = DPoPProofBuilder(key: laptop)
            let url = first.issuer + "/oauth/token"
            let asked = try bound(second, proof: try builder.proof(method: "POST", url: url))
            #expect(asked.status == 400 && asked.errorCode == "use_dpop_nonce", "\(asked.text)")
            let nonce = try #require(asked.headers["DPoP-Nonce"], "no DPoP-Nonce from B")
            let proof = try builder.proof(method: "POST", url: url, nonce: nonce)
            let withNonce = try bound(first, proof: proof)
            #expect(
                withNonce.status == 200 && withNonce.json?["token_type"] == "DPoP", "B's nonce at A: \(withNonce.text)")
            let replayed = try bound(second, proof: proof)
            #expect(replayed.status == 400 && replayed.errorCode == "invalid_dpop_proof", "\(replayed.text)")
        }

        /// `keys rotate --delay 8`: the instance ahead signs with the new key first, for about the
        /// difference of the clocks; meanwhile and after, each instance takes the other's tokens.
        static func rotationAcrossSkew(
            _ first: TestAPI, _ second: TestAPI, laptop: RSAPrivateKey, database: String, environment: TestEnvironment
        ) throws {
            let rotated = try KeyAuthServerProcess.runCommand(
                ["keys", "rotate", "--alg", "ES256", "--delay", "8", "--db", database, "--config", "/dev/null"])
            #expect(rotated.status == 0, "\(rotated.error)")
            let newKID = rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)
            func keyID(_ token: String) throws -> String? {
                try CompactJWS(parsing: token, algorithms: Set(JWSAlgorithm.allCases)).keyID
            }
            let deadline = ServerClock.now() + 30
            var signedApart = false
            while ServerClock.now() < deadline {
                let wall = ServerClock.now()
                if wall > environment.clock.now { environment.clock.advance(by: wall - environment.clock.now) }
                let (ofA, ofB) = (try first.accessToken(laptop), try second.accessToken(laptop))
                #expect(try second.authorized("GET", "/v1/devices", token: ofA).status == 200, "A's token at B")
                #expect(try first.authorized("GET", "/v1/devices", token: ofB).status == 200, "B's token at A")
                let kids = (try keyID(ofA), try keyID(ofB))
                if kids.0 != kids.1 { signedApart = true }
                if kids.0 == newKID && kids.1 == newKID { break }
                usleep(500_000)
            }
            #expect(signedApart, "the instances never signed with different keys: is the clock of B off?")
            #expect(try keyID(try second.accessToken(laptop)) == newKID)
        }

        /// The `iat` claim of `token`.
        static func issuedAt(_ token: String) throws -> Int64? {
            let payload = token.split(separator: ".").dropFirst().first.map(String.init) ?? ""
            return try JSONValue(parsing: Base64URL.decode(payload) ?? [])["iat"]?.integerValue
        }
    }
}

@Suite("Clock skew: the start's comparison with the database's clock")
struct ClockSkewCheckTests {
    @Test("within 2 s agrees, up to the 10 s leeway warns, beyond it refuses, either way round")
    func bounds() {
        let database: Int64 = 1_800_000_000
        #expect(ClockSkewCheck.verdict(server: database, database: database) == .agrees)
        #expect(ClockSkewCheck.verdict(server: database - 2, database: database) == .agrees)
        guard case .warns(let line) = ClockSkewCheck.verdict(server: database + 3, database: database) else {
            Issue.record("3 s ahead does not warn")
            return
        }
        #expect(
            line
                == "warning: this server's clock is 3 s ahead of the database's; keep every instance's clock synchronized (NTP)"
        )
        guard case .warns = ClockSkewCheck.verdict(server: database - 10, database: database) else {
            Issue.record("10 s behind does not warn")
            return
        }
        guard case .refuses(let reason) = ClockSkewCheck.verdict(server: database - 11, database: database) else {
            Issue.record("11 s behind does not refuse")
            return
        }
        #expect(reason.hasPrefix("this server's clock is 11 s behind the database's, more than the 10 s leeway"))
        // The purge margin covers two instances at the refusal bound on either side, with room.
        #expect(ClockSkewCheck.purgeMargin > 2 * ClockSkewCheck.refusalBound)
    }
}
