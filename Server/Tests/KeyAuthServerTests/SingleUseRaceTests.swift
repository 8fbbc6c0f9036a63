import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// What PROTOCOL.md promises happens at most once, raced for real: each round sends one value
/// (a code, an approved request, an assertion, a proof) in several requests released together,
/// split across both servers on PostgreSQL, and checks that exactly one request got what the value
/// gives, that every other one was refused as the protocol says, that no request got a 5xx, and
/// that the servers still answer.
enum SingleUseRace: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// Section 10: a code redeemed by several requests; one gets tokens, and the reuse revokes them.
    case authorizationCode = "authorization code"
    /// Sections 4 and 9: a recovery code used by registrations of different keys.
    case recoveryCode = "recovery code"
    /// Section 4: an enrollment code from `keyauth-server enroll` used by registrations of
    /// different keys.
    case enrollmentCode = "enrollment code"
    /// Section 8: an approved CIBA request polled by several requests.
    case approvedSignIn = "approved CIBA request"
    /// Section 2, rule 7: one device assertion sent in several logins.
    case deviceAssertion = "device assertion"
    /// Section 4, "DPoP proofs": one proof's `jti` sent with several requests.
    case dpopProof = "DPoP proof"

    var testDescription: String { rawValue }

    /// Requests per round.
    static let racers = 12
    /// Rounds per race.
    static let rounds = 20

    /// Runs the race on `deployment`, then checks that its servers still answer.
    func run(on deployment: RaceDeployment) throws {
        switch self {
        case .authorizationCode: try Self.authorizationCodes(deployment)
        case .recoveryCode: try Self.recoveryCodes(deployment)
        case .enrollmentCode: try Self.enrollmentCodes(deployment)
        case .approvedSignIn: try Self.approvedSignIns(deployment)
        case .deviceAssertion: try Self.deviceAssertions(deployment)
        case .dpopProof: try Self.dpopProofs(deployment)
        }
        #expect(deployment.isHealthy(), "a server stopped answering after the \(rawValue) race")
    }

    /// Expects no 5xx and no missing answer, and exactly one answer with status `winner`;
    /// every other answer must be `loser` with one of `errors`, or, where `busyLoses`, the busy
    /// answer of a server hashing as many recovery codes as it allows at once.
    private static func expectOneWinner(
        _ answers: [RaceAnswer], winner: Int, loser: Int, errors: Set<String>, round: Int, busyLoses: Bool = false
    ) {
        func isBusy(_ answer: RaceAnswer) -> Bool {
            busyLoses && answer.status == 503 && answer.error == "temporarily_unavailable"
        }
        #expect(
            answers.allSatisfy { (200..<500).contains($0.status) || isBusy($0) },
            "round \(round): \(answers) \(answers.map(\.text))")
        #expect(answers.filter { $0.status == winner }.count == 1, "round \(round): \(answers)")
        let losers = answers.filter { $0.status != winner }
        #expect(
            losers.allSatisfy { ($0.status == loser && errors.contains($0.error ?? "")) || isBusy($0) },
            "round \(round): \(losers) \(losers.map(\.text))")
    }

    // MARK: - Authorization codes

    /// One signed-in browser asks `/authorize` for a code each round (a signed-in session gets one
    /// at once); the racers redeem it. The one 200's access token must then be refused by
    /// `/userinfo` on every server: a reuse revokes it, also one that overlapped the redemption.
    private static func authorizationCodes(_ deployment: RaceDeployment) throws {
        deployment.syncClock()
        let api = deployment.instances[0]
        let laptop = try ServerTestKeys.key("race-code-laptop")
        let device = ApprovingDevice(api: api, key: laptop, token: try api.activeDevice(user: "alice", key: laptop))
        let client = try OpenIDTestAPI.addClient(api)
        var browser = OpenIDBrowser(api: api)
        let signedIn = try OpenIDTestAPI.signIn(
            &browser, device: device, OpenIDTestAPI.authorization(client, pkce: try PKCE()))
        #expect(try OpenIDTestAPI.redirect(signedIn).parameters["code"] != nil)

        for round in 0..<rounds {
            deployment.syncClock()
            let pkce = try PKCE()
            let answer = try browser.get("/authorize", query: OpenIDTestAPI.authorization(client, pkce: pkce))
            let code = try #require(try OpenIDTestAPI.redirect(answer).parameters["code"], "round \(round)")
            let answers = Race.run(racers) { index in
                try OpenIDTestAPI.redeem(deployment.instance(index), client, code: code, verifier: pkce.verifier)
            }
            expectOneWinner(answers, winner: 200, loser: 400, errors: ["invalid_grant"], round: round)
            guard let token = answers.lazy.compactMap({ $0.accessToken }).first else { continue }
            for instance in deployment.instances {
                let info = try OpenIDTestAPI.userInfo(instance, token: token)
                #expect(
                    info.status == 401 && info.errorCode == "invalid_token",
                    "round \(round): the token of a reused code still works: \(info.status) \(info.text)")
            }
        }
    }

    // MARK: - Recovery and enrollment codes

    /// Keys for registrations, each used until it registers: the losers of a round race again.
    private struct KeyPool {
        private(set) var keys: [RSAPrivateKey]
        private var next: Int

        init(_ count: Int) throws {
            keys = try (0..<count).map { try ServerTestKeys.key("race-key-\($0)") }
            next = count
        }

        /// Replaces the keys that registered with fresh ones.
        mutating func replace(_ used: [Int]) throws {
            for index in used {
                keys[index] = try ServerTestKeys.key("race-key-\(next)")
                next += 1
            }
        }
    }

    /// `POST /v1/devices` for alice with `codeField` (`enrollment_code` or `recovery_code`).
    private static func register(
        _ api: TestAPI, key: RSAPrivateKey, codeField: String, code: String
    ) throws -> HTTPResponse {
        try api.registerBody(
            .object([
                "user": "alice", "name": "racer", "public_key": .string(key.publicKey.pemRepresentation),
                "proof": .string(try api.assertion(key)), codeField: .string(code),
            ]))
    }

    /// Registrations of different keys, each with the round's code: exactly one is stored (201,
    /// active), the others get 403 `access_denied`, and alice has exactly one more device.
    /// Recovery codes may also lose with 503 on the server processes, which hash at most half
    /// their processors' worth at once (PROTOCOL.md section 4); two still race across them.
    private static func codeRace(
        _ deployment: RaceDeployment, codeField: String, code: (Int) throws -> String
    ) throws {
        var pool = try KeyPool(racers)
        for round in 0..<rounds {
            deployment.syncClock()
            let roundCode = try code(round)
            let before = try deployment.storage.devices(user: "alice").count
            let keys = pool.keys
            let answers = Race.run(racers) { index in
                try register(deployment.instance(index), key: keys[index], codeField: codeField, code: roundCode)
            }
            expectOneWinner(
                answers, winner: 201, loser: 403, errors: ["access_denied"], round: round,
                busyLoses: codeField == "recovery_code")
            #expect(
                try deployment.storage.devices(user: "alice").count == before + 1,
                "round \(round): \(codeField) registered \(answers.filter { $0.status == 201 }.count) devices")
            try pool.replace(answers.indices.filter { answers[$0].status == 201 })
        }
    }

    /// Alice's laptop makes a set of codes (a new set every 10 rounds); each round's racers use
    /// one of them.
    private static func recoveryCodes(_ deployment: RaceDeployment) throws {
        deployment.syncClock()
        let api = deployment.instances[0]
        let laptop = try ServerTestKeys.key("race-recovery-laptop")
        #expect(try api.register(user: "alice", key: laptop).status == 201)
        var codes: [String] = []
        try codeRace(deployment, codeField: "recovery_code") { round in
            if round % 10 == 0 {
                let assertion = try api.assertion(
                    laptop, claims: ["recovery_codes": "alice", "amr": .array(["swk", "pin"])])
                let made = try api.send(
                    "POST", "/v1/recovery-codes",
                    headers: [
                        "Authorization": "Bearer \(try api.accessToken(laptop))", "Content-Type": "application/json",
                    ],
                    body: Array(JSONValue.object(["assertion": .string(assertion)]).serialized().utf8))
                codes = (made.json?["codes"]?.arrayValue ?? []).compactMap(\.stringValue)
                guard codes.count == 10 else { throw TestFailure("no recovery codes: \(made.status) \(made.text)") }
            }
            return codes[round % 10]
        }
    }

    /// Each round the administrator runs `keyauth-server enroll alice` for a new code.
    private static func enrollmentCodes(_ deployment: RaceDeployment) throws {
        try codeRace(deployment, codeField: "enrollment_code") { _ in
            let enrolled = try KeyAuthServerProcess.runCommand(["enroll", "alice", "--db", deployment.database])
            guard enrolled.status == 0 else { throw TestFailure("keyauth-server enroll failed: \(enrolled.error)") }
            return enrolled.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    // MARK: - CIBA

    /// A client asks, a device of the user approves, and the racers poll: exactly one gets the
    /// token response; the others get `invalid_grant` (already collected) or `slow_down`. Two
    /// users take turns, since one user gets 20 client requests an hour.
    private static func approvedSignIns(_ deployment: RaceDeployment) throws {
        deployment.syncClock()
        let api = deployment.instances[0]
        let client = try api.addClient()
        let keys = try (0..<2).map { try ServerTestKeys.key("race-ciba-\($0)") }
        for (index, key) in keys.enumerated() {
            #expect(try api.register(user: "carol-\(index)", key: key).status == 201)
        }
        for round in 0..<rounds {
            deployment.syncClock()
            let asker = deployment.instance(round)
            let id = try asker.startSignIn(client, user: "carol-\(round % 2)")
            let key = keys[round % 2]
            let approved = try deployment.instance(round + 1).answer(
                id, decision: "approve", assertion: try api.approvalAssertion(key, id: id),
                token: try api.accessToken(key))
            #expect(approved.status == 200, "round \(round): \(approved.text)")
            let answers = Race.run(racers) { index in try deployment.instance(index).poll(client, id: id) }
            expectOneWinner(answers, winner: 200, loser: 400, errors: ["invalid_grant", "slow_down"], round: round)
        }
    }

    // MARK: - Replay rules

    /// One assertion, several logins: exactly one 200, the others `invalid_grant`.
    private static func deviceAssertions(_ deployment: RaceDeployment) throws {
        deployment.syncClock()
        let key = try ServerTestKeys.key("race-assertion")
        #expect(try deployment.instances[0].register(user: "dave", key: key).status == 201)
        for round in 0..<rounds {
            deployment.syncClock()
            let assertion = try deployment.instances[0].assertion(key)
            let answers = Race.run(racers) { index in try deployment.instance(index).login(assertion: assertion) }
            expectOneWinner(answers, winner: 200, loser: 400, errors: ["invalid_grant"], round: round)
        }
    }

    /// A DPoP-bound token and one proof for `GET /v1/devices`, sent with several requests: one
    /// 200, the others 401 `invalid_dpop_proof`.
    private static func dpopProofs(_ deployment: RaceDeployment) throws {
        deployment.syncClock()
        let api = deployment.instances[0]
        let key = try ServerTestKeys.key("race-dpop")
        #expect(try api.register(user: "erin", key: key).status == 201)
        let builder = DPoPProofBuilder(key: key, clock: deployment.clock.clock)
        let login = try api.send(
            "POST", "/oauth/token",
            headers: [
                "Content-Type": "application/x-www-form-urlencoded",
                "DPoP": try builder.proof(method: "POST", url: api.issuer + "/oauth/token"),
            ],
            body: Array(
                "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try api.assertion(key)))"
                    .utf8))
        let token = try #require(login.json?["access_token"]?.stringValue, "\(login.status) \(login.text)")
        #expect(login.json?["token_type"]?.stringValue == "DPoP")
        for round in 0..<rounds {
            deployment.syncClock()
            let proof = try builder.proof(method: "GET", url: api.issuer + "/v1/devices", accessToken: token)
            let answers = Race.run(racers) { index in
                try deployment.instance(index).send(
                    "GET", "/v1/devices", headers: ["Authorization": "DPoP \(token)", "DPoP": proof])
            }
            expectOneWinner(answers, winner: 200, loser: 401, errors: ["invalid_dpop_proof"], round: round)
        }
    }
}

extension RaceAnswer {
    /// The `access_token` of a token response.
    var accessToken: String? {
        (try? JSONValue(parsing: Array(text.utf8)))?["access_token"]?.stringValue
    }
}

extension StorageContractTests {
    /// The races against one in-process server on SQLite. Nested in ``StorageContractTests``
    /// too: each race waits synchronously for its requests, holding a thread of Swift's
    /// cooperative pool (two on a 2-core machine) for about 20 s, and run beside the other
    /// serialized suites it left the rest of a full run without a thread for minutes.
    @Suite("Single use: each promised once raced over sockets on SQLite")
    struct SingleUseRaceTests {
        @Test(
            "exactly one request gets what a single-use value gives", .timeLimit(.minutes(5)),
            arguments: SingleUseRace.allCases)
        func raceOnSQLite(_ race: SingleUseRace) throws {
            try RaceDeployment.onSQLite { try race.run(on: $0) }
        }
    }

    /// The races against two server processes on one PostgreSQL database, the racers split
    /// between them. Nested in ``StorageContractTests`` to share its `.serialized` trait (its
    /// outage test stops the PostgreSQL server).
    @Suite("Single use: each promised once raced across two servers on PostgreSQL")
    struct SingleUsePostgresRaceTests {
        @Test(
            "exactly one request, on either server, gets what a single-use value gives",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"),
            .timeLimit(.minutes(5)), arguments: SingleUseRace.allCases)
        func raceOnPostgres(_ race: SingleUseRace) throws {
            try RaceDeployment.onPostgres { try race.run(on: $0) }
        }
    }
}
