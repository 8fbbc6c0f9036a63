import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// Two `keyauth-server serve` processes of the built binary on one PostgreSQL database, as
    /// behind a load balancer: whatever one server accepts, records or changes, the other must
    /// honour at once, since a client's next request may reach either.
    ///
    /// Nested in ``StorageContractTests`` to share its `.serialized` trait: its outage test stops
    /// the PostgreSQL server, which would fail these tests if they ran meanwhile.
    ///
    /// Each test has a fresh schema (`PostgresTestServer.makeDatabase`), dropped at the end, and
    /// both servers name the same issuer, as every instance of one deployment must. Reported as
    /// skipped when `KEYAUTH_TEST_POSTGRES_URL` is unset (`eval "$(sudo .ci/postgres.sh)"`).
    @Suite("Several servers on one PostgreSQL database")
    struct MultiInstanceTests {
        static let issuer = "http://keyauth.test"
        static let isEnabled = PostgresTestServer.url != nil
        static let disabledReason: Comment =
            "KEYAUTH_TEST_POSTGRES_URL is not set (run `eval \"$(sudo .ci/postgres.sh)\"`)"
        /// How many times the simultaneous start on an empty database is tried.
        static let simultaneousStartRounds = 6

        @Test(
            "a token issued by one server is accepted by the other, and both publish its key",
            .enabled(if: isEnabled, disabledReason))
        func sharesAccessTokens() throws {
            try withServers { a, b, _ in
                let key = try ServerTestKeys.key("multi-share")
                let registered = try a.register(user: "alice", key: key)
                #expect(registered.status == 201, "\(registered.text)")

                let loginOnB = try b.login(key)
                #expect(loginOnB.status == 200, "\(loginOnB.text)")
                let tokenFromB = try #require(loginOnB.json?["access_token"]?.stringValue)
                let tokenFromA = try a.accessToken(key)

                // Any JWT library holding A's published keys accepts what B signed.
                let jwksOfA = try a.jwks()
                let jwksOfB = try b.jwks()
                let verified = try Self.verifyAccessToken(tokenFromB, keys: jwksOfA)
                #expect(verified.subject == "alice")
                #expect(verified.claims["client_id"]?.stringValue == key.publicKey.fingerprint)
                #expect(try Self.verifyAccessToken(tokenFromA, keys: jwksOfB).subject == "alice")

                // One signing key for the deployment, published by both.
                let signingKID = try #require(Self.keyID(of: tokenFromA))
                #expect(Self.keyID(of: tokenFromB) == signingKID)
                #expect(jwksOfA[signingKID] != nil && jwksOfB[signingKID] != nil)
                #expect(jwksOfA[signingKID]?.thumbprint == signingKID)

                // A's device API takes B's token, and shows the login B recorded.
                let listed = try a.authorized("GET", "/v1/devices", token: tokenFromB)
                #expect(listed.status == 200, "\(listed.text)")
                let devices = listed.json?["devices"]?.arrayValue ?? []
                #expect(devices.count == 1)
                #expect(devices.first?["kid"]?.stringValue == key.publicKey.fingerprint)
                #expect(devices.first?["status"]?.stringValue == "active")
                #expect(devices.first?["last_login_at"]?.stringValue != nil)
                #expect(try b.authorized("GET", "/v1/devices", token: tokenFromA).status == 200)
            }
        }

        @Test(
            "an assertion accepted by one server is refused as a replay by the other",
            .enabled(if: isEnabled, disabledReason))
        func refusesReplaysAcrossServers() throws {
            try withServers { a, b, _ in
                let key = try ServerTestKeys.key("multi-replay")
                #expect(try a.register(user: "bob", key: key).status == 201)

                let assertion = try a.assertion(key)
                let accepted = try a.login(assertion: assertion)
                #expect(accepted.status == 200, "\(accepted.text)")
                let replayed = try b.login(assertion: assertion)
                #expect(replayed.status == 400)
                #expect(replayed.errorCode == "invalid_grant")
                #expect(replayed.errorDescription?.contains("already used") == true, "\(replayed.text)")

                // The same assertion sent to both at once: exactly one server accepts it.
                for round in 0..<8 {
                    let contested = try a.assertion(key)
                    let servers = [a, b]
                    let answers = runConcurrently(2) { (index: Int) throws(StorageError) -> Int in
                        (try? servers[index].login(assertion: contested).status) ?? 0
                    }
                    let statuses = answers.map { (try? $0.get()) ?? 0 }.sorted()
                    #expect(statuses == [200, 400], "round \(round): A and B answered \(statuses)")
                }
            }
        }

        @Test(
            "a device revoked on one server cannot log in on the other",
            .enabled(if: isEnabled, disabledReason))
        func honoursRevocationsAcrossServers() throws {
            try withServers { a, b, _ in
                let key = try ServerTestKeys.key("multi-revoke")
                let other = try ServerTestKeys.key("multi-revoke-other")
                #expect(try a.register(user: "carol", key: key).status == 201)
                // A logs the device in first, so any state A keeps about it is warm.
                let token = try a.accessToken(key)
                let signedBefore = try a.assertion(key)
                let unknown = try a.login(other)

                let kid = key.publicKey.fingerprint
                let revoked = try b.authorized("DELETE", "/v1/devices/\(kid)", token: token)
                #expect(revoked.status == 204, "\(revoked.text)")

                let fresh = try a.login(key)
                #expect(fresh.status == 400, "\(fresh.text)")
                #expect(fresh.errorCode == "invalid_grant")
                // Indistinguishable from an unknown key, so revocation cannot be probed.
                #expect(fresh.errorDescription == unknown.errorDescription)
                let early = try a.login(assertion: signedBefore)
                #expect(early.status == 400 && early.errorCode == "invalid_grant", "\(early.text)")

                // The device's tokens end too, on both servers.
                for server in [a, b] {
                    let listed = try server.authorized("GET", "/v1/devices", token: token)
                    #expect(listed.status == 401, "server \(server.name): \(listed.text)")
                    #expect(listed.errorCode == "invalid_token")
                }
            }
        }

        @Test(
            "a device registered on one server and approved on the other logs in",
            .enabled(if: isEnabled, disabledReason))
        func honoursApprovalsAcrossServers() throws {
            try withServers { a, b, _ in
                let first = try ServerTestKeys.key("multi-approve-first")
                let second = try ServerTestKeys.key("multi-approve-second")
                #expect(try a.register(user: "dave", key: first).status == 201)

                let pending = try b.register(user: "dave", key: second, name: "dave-phone")
                #expect(pending.status == 202, "\(pending.text)")
                #expect(pending.json?["status"]?.stringValue == "pending")
                let waiting = try b.login(second)
                #expect(waiting.status == 400)
                #expect(waiting.errorCode == "authorization_pending", "\(waiting.text)")

                let token = try b.accessToken(first)
                let kid = second.publicKey.fingerprint
                let approved = try a.approveDevice(kid, approver: first, token: token)
                #expect(approved.status == 200, "\(approved.text)")
                #expect(approved.json?["status"]?.stringValue == "active")

                let login = try b.login(second)
                #expect(login.status == 200, "\(login.text)")
                let listed = try b.authorized("GET", "/v1/devices", token: try b.accessToken(second))
                let statuses = (listed.json?["devices"]?.arrayValue ?? []).map { $0["status"]?.stringValue }
                #expect(statuses == ["active", "active"])
            }
        }

        @Test(
            "an enrollment code from `keyauth-server enroll` works once, on whichever server",
            .enabled(if: isEnabled, disabledReason))
        func consumesEnrollmentCodesOnce() throws {
            try withServers { a, b, url in
                for (round, (first, second)) in [(a, b), (b, a)].enumerated() {
                    let user = "erin-\(round)"
                    let enrolled = try KeyAuthServerProcess.runCommand(["enroll", user, "--db", url])
                    #expect(enrolled.status == 0, "keyauth-server enroll failed: \(enrolled.error)")
                    let code = enrolled.output.trimmingCharacters(in: .whitespacesAndNewlines)
                    #expect(!code.isEmpty)

                    let used = try first.register(
                        user: user, key: try ServerTestKeys.key("multi-enroll-\(round)-a"), code: code)
                    #expect(used.status == 201, "server \(first.name): \(used.text)")
                    #expect(used.json?["status"]?.stringValue == "active")

                    let reused = try second.register(
                        user: user, key: try ServerTestKeys.key("multi-enroll-\(round)-b"), code: code)
                    #expect(reused.status == 403, "server \(second.name): \(reused.text)")
                    #expect(reused.errorCode == "access_denied")
                }
            }
        }

        @Test(
            "servers started at once on an empty database both come up and accept each other's tokens",
            .enabled(if: isEnabled, disabledReason))
        func startsTogetherOnAnEmptyDatabase() throws {
            var disagreements: [String] = []
            for round in 1...Self.simultaneousStartRounds {
                try withServers(startingAtOnce: true) { a, b, url in
                    #expect(
                        try Self.count("schema_migrations", url: url) == Int64(SQLSchema.migrations.count),
                        "round \(round): the migrations ran more than once")
                    let key = try ServerTestKeys.key("multi-race")
                    let registered = try a.register(user: "frank", key: key)
                    #expect(registered.status == 201, "round \(round): \(registered.text)")

                    let tokenFromA = try a.accessToken(key)
                    let tokenFromB = try b.accessToken(key)
                    let kidOfA = Self.keyID(of: tokenFromA) ?? "?"
                    let kidOfB = Self.keyID(of: tokenFromB) ?? "?"
                    let jwksOfA = try a.jwks()
                    let jwksOfB = try b.jwks()
                    let aTakesB = try a.authorized("GET", "/v1/devices", token: tokenFromB).status
                    let bTakesA = try b.authorized("GET", "/v1/devices", token: tokenFromA).status
                    let aVerifiesB = (try? Self.verifyAccessToken(tokenFromB, keys: jwksOfA)) != nil
                    let bVerifiesA = (try? Self.verifyAccessToken(tokenFromA, keys: jwksOfB)) != nil
                    guard aTakesB != 200 || bTakesA != 200 || !aVerifiesB || !bVerifiesA else { return }
                    let rows = (try? Self.count("signing_keys", url: url)).map(String.init) ?? "?"
                    disagreements.append(
                        "round \(round): A signs with \(kidOfA) and publishes \(jwksOfA.keys.sorted()); "
                            + "B signs with \(kidOfB) and publishes \(jwksOfB.keys.sorted()); "
                            + "\(rows) rows in signing_keys; GET /v1/devices with B's token on A: \(aTakesB), "
                            + "with A's token on B: \(bTakesA)")
                }
            }
            #expect(
                disagreements.isEmpty,
                """
                servers started at once disagreed on the signing key in \(disagreements.count) of \
                \(Self.simultaneousStartRounds) rounds:
                \(disagreements.joined(separator: "\n"))
                """)
        }

        @Test(
            "a key rotated with `keyauth-server keys rotate` is published by both servers, then both sign with it; older tokens keep working",
            .enabled(if: isEnabled, disabledReason))
        func rotatesSigningKeysTogether() throws {
            try withServers(extraArguments: ["--cleanup-interval", "1"]) { a, b, url in
                let key = try ServerTestKeys.key("multi-rotate")
                #expect(try a.register(user: "gina", key: key).status == 201)
                let before = try a.accessToken(key)
                let oldKID = try #require(Self.keyID(of: before))

                let rotated = try KeyAuthServerProcess.runCommand(
                    ["keys", "rotate", "--alg", "ES256", "--delay", "3", "--db", url])
                #expect(rotated.status == 0, "keyauth-server keys rotate failed: \(rotated.error)")
                let newKID = rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)
                // Both publish it within a cleanup interval, before it signs anything.
                try Self.waitUntil("both servers publish \(newKID)") {
                    try a.jwks()[newKID] != nil && b.jwks()[newKID] != nil
                }
                try Self.waitUntil("both servers sign with \(newKID)") {
                    try Self.keyID(of: a.accessToken(key)) == newKID && Self.keyID(of: b.accessToken(key)) == newKID
                }
                let after = try b.accessToken(key)
                for server in [a, b] {
                    let published = try server.jwks()
                    #expect(Set(published.keys) == [oldKID, newKID], "server \(server.name)")
                    for token in [before, after] {
                        #expect(try Self.verifyAccessToken(token, keys: published).subject == "gina")
                        let listed = try server.authorized("GET", "/v1/devices", token: token)
                        #expect(listed.status == 200, "server \(server.name): \(listed.text)")
                    }
                }
            }
        }

        /// Polls `condition` every 100 ms for up to 30 s (a condition, not a timing, is tested).
        static func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
            let deadline = Date().addingTimeInterval(30)
            while try !condition() {
                guard Date() < deadline else { throw TestFailure("gave up waiting until \(what)") }
                usleep(100_000)
            }
        }

        @Test(
            "a %00 in a form or a query is refused with 400 before PostgreSQL sees it",
            .enabled(if: isEnabled, disabledReason))
        func zeroBytesStopAtTheDoor() throws {
            try withServers { a, _, _ in
                let form =
                    "grant_type=authorization_code&code=c&client_id=rp%00x&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb"
                    + "&code_verifier=" + String(repeating: "v", count: 43)
                let token = try a.transport.send(
                    HTTPRequest(
                        method: "POST", path: "/oauth/token",
                        headers: ["Content-Type": "application/x-www-form-urlencoded"], body: Array(form.utf8)))
                #expect(token.status == 400, "\(token.status) \(token.text)")
                #expect(token.json?["error"]?.stringValue == "invalid_request")
                let authorize = try a.transport.send(
                    HTTPRequest(method: "GET", path: "/authorize", query: ["client_id": "rp%00x"]))
                #expect(
                    authorize.status == 400 && authorize.headers["Location"] == nil,
                    "\(authorize.status) \(authorize.text)")
                // The server goes on answering what is well formed.
                let key = try ServerTestKeys.key("multi-zero")
                #expect(try a.register(user: "alice", key: key).status == 201)
                #expect(try a.login(key).status == 200)
            }
        }

        // MARK: - Fixture

        /// Runs `body` with clients of two servers on a fresh schema
        /// (``PostgresTestServer/withServerProcesses(issuer:startingAtOnce:extraArguments:_:)``),
        /// then stops them (expecting a clean exit) and drops the schema.
        ///
        /// - Parameters:
        ///   - startingAtOnce: launch both processes back to back before waiting for either;
        ///     otherwise B is launched only once A listens, so that the scenarios do not depend
        ///     on how two servers settle the signing key on an empty database (the subject of
        ///     ``startsTogetherOnAnEmptyDatabase()``).
        ///   - body: gets clients for A and B and the database URL both use.
        private func withServers(
            startingAtOnce: Bool = false, extraArguments: [String] = [],
            _ body: (ServerClient, ServerClient, String) throws -> Void
        ) throws {
            try PostgresTestServer.withServerProcesses(
                issuer: Self.issuer, startingAtOnce: startingAtOnce, extraArguments: extraArguments
            ) { servers, url in
                let clients = servers.map { ServerClient(name: $0.name, port: $0.port, issuer: Self.issuer) }
                try body(clients[0], clients[1], url)
            }
        }

        /// Verifies an access token as any relying party would: with a published JWK set, the
        /// issuer as `iss` and `aud`, and `typ` `at+jwt` (PROTOCOL.md section 3).
        static func verifyAccessToken(_ token: String, keys: [String: JWSPublicKey]) throws -> CheckedAccessToken {
            try CheckedAccessToken(token, issuer: issuer, keys: keys)
        }

        /// The `kid` in a token's header.
        static func keyID(of token: String) -> String? {
            (try? CompactJWS(parsing: token, algorithms: Set(JWSAlgorithm.allCases)))?.header["kid"]?.stringValue
        }

        /// The number of rows of `table` in the schema that `url` selects.
        static func count(_ table: String, url: String) throws -> Int64? {
            let connection = try PostgresConnection(PostgresLocation(url))
            guard connection.isOpen else { throw TestFailure("cannot connect to count \(table)") }
            return try connection.execute("SELECT count(*) FROM \(table)").firstRow?.integer(0)
        }
    }
}

/// A client of one server process, signing assertions on the real clock (the servers run on it).
struct ServerClient: Sendable {
    let name: String
    let transport: SocketTransport
    let issuer: String

    init(name: String, port: UInt16, issuer: String) {
        self.name = name
        self.transport = SocketTransport(port: port)
        self.issuer = issuer
    }

    /// A fresh device assertion of `key` for the deployment's issuer.
    func assertion(_ key: RSAPrivateKey) throws -> String {
        try JWTBuilder(key: key, audience: issuer).sign()
    }

    /// `POST /v1/devices` with a valid proof.
    func register(user: String, key: RSAPrivateKey, name: String = "test-device", code: String? = nil) throws
        -> HTTPResponse
    {
        var body: [String: JSONValue] = [
            "user": .string(user), "name": .string(name), "public_key": .string(key.publicKey.pemRepresentation),
            "proof": .string(try assertion(key)),
        ]
        if let code { body["enrollment_code"] = .string(code) }
        return try transport.send(
            HTTPRequest(
                method: "POST", path: "/v1/devices", headers: ["Content-Type": "application/json"],
                body: Array(JSONValue.object(body).serialized().utf8)))
    }

    /// `POST /oauth/token` with `assertion`.
    func login(assertion: String) throws -> HTTPResponse {
        let form = "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(assertion))"
        return try transport.send(
            HTTPRequest(
                method: "POST", path: "/oauth/token", headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: Array(form.utf8)))
    }

    /// Logs in with a fresh assertion of `key`.
    func login(_ key: RSAPrivateKey) throws -> HTTPResponse {
        try login(assertion: try assertion(key))
    }

    /// An access token for `key`'s device, which must be active.
    func accessToken(_ key: RSAPrivateKey) throws -> String {
        let response = try login(key)
        guard response.status == 200, let token = response.json?["access_token"]?.stringValue else {
            throw TestFailure("login on server \(name) failed: \(response.status) \(response.text)")
        }
        return token
    }

    /// `POST /v1/devices/{kid}/approve` with the approving device's `token` and a fresh assertion
    /// of its key `approver` naming the pending device, after a PIN.
    func approveDevice(_ kid: String, approver: RSAPrivateKey, token: String) throws -> HTTPResponse {
        var claims = JWTClaims()
        claims.set("approve_kid", string: kid)
        claims.set("amr", strings: ["swk", "pin"])
        let assertion = try JWTBuilder(key: approver, audience: issuer).sign(claims: claims)
        return try transport.send(
            HTTPRequest(
                method: "POST", path: "/v1/devices/\(kid)/approve",
                headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
                body: Array(JSONValue.object(["assertion": .string(assertion)]).serialized().utf8)))
    }

    /// A request with a Bearer token.
    func authorized(_ method: String, _ path: String, token: String) throws -> HTTPResponse {
        try transport.send(HTTPRequest(method: method, path: path, headers: ["Authorization": "Bearer \(token)"]))
    }

    /// `GET /.well-known/jwks.json`, as keys by `kid`.
    func jwks() throws -> [String: JWSPublicKey] {
        let response = try transport.send(HTTPRequest(method: "GET", path: "/.well-known/jwks.json"))
        guard response.status == 200, let entries = response.json?["keys"]?.arrayValue else {
            throw TestFailure("GET /.well-known/jwks.json on server \(name): \(response.status) \(response.text)")
        }
        var keys: [String: JWSPublicKey] = [:]
        for entry in entries {
            guard let kid = entry["kid"]?.stringValue else {
                throw TestFailure("a JWK of server \(name) lacks kid: \(response.text)")
            }
            keys[kid] = try JWSPublicKey(jwk: JWK(jsonValue: entry))
        }
        return keys
    }
}
