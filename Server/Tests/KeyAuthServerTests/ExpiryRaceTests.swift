import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// Answers that arrive at the moment their request expires, run as real races: a server on
    /// a socket, several threads sending at once, and one more moving the server's clock past
    /// the expiry at a random moment among them, round after round. Windows too narrow for
    /// that to hit reliably are swept as well: the expiry is stepped in right after each clock
    /// reading one request makes (``SteppingClock``), with a second request run there when two
    /// requests are what race.
    ///
    /// Whatever interleaving comes, an approval (or a denial) is either applied to a live request
    /// and then honoured, or refused with a clear error; the approver and the requester are never
    /// told different things, a token comes only from a live approval and at most once, and no
    /// answer is a 5xx.
    ///
    /// Nested in ``StorageContractTests`` to share its `.serialized` trait: its outage test stops
    /// the PostgreSQL server. The PostgreSQL runs are reported as skipped when
    /// `KEYAUTH_TEST_POSTGRES_URL` is unset (`eval "$(sudo .ci/postgres.sh)"`).
    @Suite("Approvals racing their request's expiry, over sockets", .timeLimit(.minutes(5)))
    struct ExpiryRaceTests {
        static let postgresReason: Comment =
            "KEYAUTH_TEST_POSTGRES_URL is not set (run `eval \"$(sudo .ci/postgres.sh)\"`)"

        @Test("a device approval at the pending device's expiry: active and honoured, or expired for both sides")
        func deviceApprovalSQLite() throws {
            try Self.deviceApprovalRace(on: .sqlite)
        }

        @Test(
            "a device approval at the pending device's expiry, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func deviceApprovalPostgres() throws {
            try Self.deviceApprovalRace(on: try #require(StorageContractBackend.postgres))
        }

        @Test("a device approval with the expiry stepped in at each clock reading it makes: never applied late")
        func deviceApprovalSweepSQLite() throws {
            try Self.deviceApprovalSweep(on: .sqlite)
        }

        @Test(
            "a device approval with the expiry stepped in at each clock reading, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func deviceApprovalSweepPostgres() throws {
            try Self.deviceApprovalSweep(on: try #require(StorageContractBackend.postgres))
        }

        @Test("a push sign-in answered at its expiry: the client collects what the device was told, once")
        func pushSignInSQLite() throws {
            try Self.pushSignInRace(on: .sqlite)
        }

        @Test(
            "a push sign-in answered at its expiry, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func pushSignInPostgres() throws {
            try Self.pushSignInRace(on: try #require(StorageContractBackend.postgres))
        }

        @Test("/authorize at the browser session's expiry: a code from a session that stays, or login_required")
        func authorizeSQLite() throws {
            try Self.authorizeRace(on: .sqlite)
        }

        @Test(
            "/authorize at the browser session's expiry, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func authorizePostgres() throws {
            try Self.authorizeRace(on: try #require(StorageContractBackend.postgres))
        }

        @Test("/authorize with the session's expiry and a second request stepped in at each clock reading")
        func authorizeSweepSQLite() throws {
            try Self.authorizeSweep(on: .sqlite)
        }

        @Test(
            "/authorize with the expiry and a second request stepped in at each clock reading, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func authorizeSweepPostgres() throws {
            try Self.authorizeSweep(on: try #require(StorageContractBackend.postgres))
        }

        @Test("an account page sign-in answered at its expiry: the browser is told what the device was told")
        func accountSignInSQLite() throws {
            try Self.browserSignInRace(on: .sqlite, through: .accountPage)
        }

        @Test(
            "an account page sign-in answered at its expiry, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func accountSignInPostgres() throws {
            try Self.browserSignInRace(on: try #require(StorageContractBackend.postgres), through: .accountPage)
        }

        @Test("an /authorize sign-in answered at its expiry: a code that redeems for an approval, once")
        func authorizeSignInSQLite() throws {
            try Self.browserSignInRace(on: .sqlite, through: .authorize)
        }

        @Test(
            "an /authorize sign-in answered at its expiry, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func authorizeSignInPostgres() throws {
            try Self.browserSignInRace(on: try #require(StorageContractBackend.postgres), through: .authorize)
        }

        @Test("new recovery codes approved at their request's expiry: the page shows what the device was told, once")
        func recoveryCodesSQLite() throws {
            try Self.recoveryCodesRace(on: .sqlite)
        }

        @Test(
            "new recovery codes approved at their request's expiry, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, postgresReason))
        func recoveryCodesPostgres() throws {
            try Self.recoveryCodesRace(on: try #require(StorageContractBackend.postgres))
        }

        // MARK: The races

        /// Rounds of the device race; each registers a new key.
        static let deviceRounds = 16
        /// Rounds of the push sign-in and the `/authorize` races.
        static let rounds = 24

        /// A new pending device per round, its expiry one second away; four approvals by the
        /// user's laptop and a login of the new device race the clock's step past it.
        static func deviceApprovalRace(on backend: StorageContractBackend) throws {
            try withServer(on: backend, { $0.pendingLifetime = 60 }) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                var approvedRounds = 0
                for round in 0..<deviceRounds {
                    let key = try ServerTestKeys.key("race-pending-\(round)")
                    let kid = key.publicKey.fingerprint
                    let registered = try api.register(user: "alice", key: key)
                    #expect(registered.status == 202, "round \(round): \(registered.text)")
                    let expiry = environment.clock.now + 60
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: 59)
                    let clock = environment.clock
                    var bodies: [@Sendable () -> Outcome] = (0..<4).map { _ in
                        { Outcome.of { try api.approveDevice(kid, approver: laptop, token: token) } }
                    }
                    bodies.append { Outcome.of { try api.login(key) } }
                    // Four approvals against one step: spread over 80 ms, the first of them comes
                    // before the step (within 20 ms) about two rounds in five; with 20 ms it did
                    // four in five, and all sixteen rounds were approved about once in forty runs.
                    // On a loaded machine the approvals come late, and once no round of sixteen
                    // was approved: the last round then steps the clock 2 s after the approvals
                    // start (or, when every round was approved, before they start), so that both
                    // sides are always met.
                    var stepDelay: ClosedRange<UInt32> = 0...20_000
                    if round == deviceRounds - 1, approvedRounds == 0 { stepDelay = 2_000_000...2_000_000 }
                    if round == deviceRounds - 1, approvedRounds == round { clock.advance(by: 2) }
                    let outcomes = try race(bodies, clock: clock, spread: 80_000, stepDelay: stepDelay)
                    let approvals = Array(outcomes[0..<4])
                    let raceLogin = outcomes[4]
                    let final = try api.login(key)
                    let stored = try #require(try api.storage.device(kid: kid))
                    let context = "round \(round): approvals \(approvals), login \(raceLogin), then \(final.status)"

                    let answered = outcomes.allSatisfy(\.isAnsweredWithoutServerError)
                    #expect(answered, "\(context)")
                    let approved = approvals.contains(where: \.isSuccess)
                    if approved { approvedRounds += 1 }
                    for approval in approvals where approval.status != 200 {
                        #expect(approval.error == "expired_token", "\(context)")
                    }
                    if approved {
                        #expect(stored.status == .active, "\(context)")
                        #expect(
                            (stored.approvedAt ?? .max) < expiry,
                            "\(context): approved at \(stored.approvedAt ?? -1), expired at \(expiry)")
                        #expect(final.status == 200, "\(context)")
                    } else {
                        #expect(stored.status == .pending, "\(context)")
                        #expect(final.errorCode == "expired_token", "\(context)")
                        #expect(raceLogin.status != 200, "\(context)")
                    }
                    environment.clock.advance(by: 5)
                }
                // The expiry came both before and after the approvals' decisions.
                #expect(approvedRounds > 0 && approvedRounds < deviceRounds, "\(approvedRounds) approved")
            }
        }

        /// A new pending device per step, one second from its expiry, approved once by the
        /// user's laptop while the server's clock steps past the expiry at its `step`-th reading,
        /// for every reading the approval makes.
        static func deviceApprovalSweep(on backend: StorageContractBackend) throws {
            try withServer(on: backend, { $0.pendingLifetime = 60 }) { environment, api, stepping in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                var readings = 0
                var outcomes: [String] = []
                var step = 0
                while step <= readings || readings == 0 {
                    let key = try ServerTestKeys.key("race-pending-\(readings == 0 ? 0 : step + 1)")
                    let kid = key.publicKey.fingerprint
                    #expect(try api.register(user: "alice", key: key).status == 202, "step \(step)")
                    let expiry = environment.clock.now + 60
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: 59)
                    let before = stepping.count
                    // The first approval only counts the readings; then the expiry comes before the
                    // first (step 0) and after each of them.
                    if step == 0 && readings > 0 { environment.clock.advance(by: 1) }
                    stepping.step(atReading: readings == 0 ? 0 : step)
                    let approval = Outcome(try api.approveDevice(kid, approver: laptop, token: token))
                    stepping.step(atReading: 0)
                    if readings == 0 {
                        readings = stepping.count - before
                        #expect(approval.status == 200, "\(approval)")
                        environment.clock.advance(by: 5)
                        continue
                    }
                    environment.clock.advance(by: max(expiry - environment.clock.now, 0))
                    let final = Outcome(try api.login(key))
                    let stored = try #require(try api.storage.device(kid: kid))
                    let context = "step \(step) of \(readings): approval \(approval), then login \(final)"
                    outcomes.append(approval.isSuccess ? "approved" : approval.error ?? "?")

                    #expect(approval.isAnsweredWithoutServerError, "\(context)")
                    if approval.isSuccess {
                        #expect(stored.status == .active, "\(context)")
                        #expect(
                            (stored.approvedAt ?? .max) < expiry,
                            "\(context): approved at \(stored.approvedAt ?? -1), expired at \(expiry)")
                        #expect(final.isSuccess, "\(context)")
                    } else {
                        #expect(approval.error == "expired_token", "\(context)")
                        #expect(stored.status == .pending, "\(context)")
                        #expect(final.error == "expired_token", "\(context)")
                    }
                    environment.clock.advance(by: 5)
                    step += 1
                }
                // The sweep put the expiry both before and after the approval's decision.
                #expect(outcomes.contains("approved") && outcomes.contains("expired_token"), "\(outcomes)")
            }
        }

        /// A client's request per round, one second from its expiry; two approvals and a denial
        /// by the user's laptop and the client's first poll race the clock's step past it; then
        /// the client polls until it has its answer.
        static func pushSignInRace(on backend: StorageContractBackend) throws {
            try withServer(on: backend, { $0.signInLifetime = 60 }) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                // Three clients in turn: one client makes at most 10 of a user's requests an hour.
                let clients = try (1...3).map { try api.addClient("Desk \($0)") }
                var answeredRounds = 0
                for round in 0..<rounds {
                    let client = clients[round % clients.count]
                    let id = try api.startSignIn(client, user: "alice")
                    let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let assertions = try (0..<2).map { _ in try api.approvalAssertion(laptop, id: id) }
                    var bodies: [@Sendable () -> Outcome] = assertions.map { assertion in
                        { Outcome.of { try api.answer(id, decision: "approve", assertion: assertion, token: token) } }
                    }
                    bodies.append { Outcome.of { try api.answer(id, decision: "deny", assertion: nil, token: token) } }
                    bodies.append { Outcome.of { try api.poll(client, id: id) } }
                    let outcomes = try race(bodies, clock: environment.clock)
                    // The client's next polls, each after the interval.
                    environment.clock.advance(by: 10)
                    let next = Outcome(try api.poll(client, id: id))
                    environment.clock.advance(by: 10)
                    let last = Outcome(try api.poll(client, id: id))
                    let answers = Array(outcomes[0..<3])
                    let polls = [outcomes[3], next, last]
                    let stored = try #require(try api.storage.signInRequest(id: id))
                    let context = "round \(round): answers \(answers), polls \(polls), stored \(stored.status)"

                    let answered = (outcomes + [next, last]).allSatisfy(\.isAnsweredWithoutServerError)
                    #expect(answered, "\(context)")
                    let accepted = answers.filter(\.isSuccess)
                    #expect(accepted.count <= 1, "\(context)")
                    if !accepted.isEmpty { answeredRounds += 1 }
                    for answer in answers where answer.status != 200 {
                        #expect(["already_answered", "expired_token"].contains(answer.error), "\(context)")
                    }
                    let tokens = polls.filter(\.hasAccessToken)
                    #expect(tokens.count <= 1, "\(context)")
                    if let answeredAt = stored.answeredAt {
                        #expect(answeredAt < expiry, "\(context): answered at \(answeredAt), expired at \(expiry)")
                    }
                    switch accepted.first?.json?["status"]?.stringValue {
                    case "approved":
                        #expect(tokens.count == 1, "\(context): the device was told approved")
                        #expect(!polls.map(\.error).contains("access_denied"), "\(context)")
                    case "denied":
                        #expect(tokens.isEmpty, "\(context)")
                        #expect(next.error == "access_denied", "\(context): the device was told denied")
                    default:
                        #expect(accepted.isEmpty, "\(context)")
                        #expect(tokens.isEmpty, "\(context)")
                        #expect(next.error == "expired_token" && last.error == "expired_token", "\(context)")
                    }
                    environment.clock.advance(by: 200)
                }
                #expect(answeredRounds > 0 && answeredRounds < rounds, "\(answeredRounds) answered")
            }
        }

        /// A signed-in browser, one second before its session's idle expiry; four `/authorize`
        /// requests with `prompt=none` race the clock's step past it; then the browser asks again.
        static func authorizeRace(on backend: StorageContractBackend) throws {
            try withServer(on: backend) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                let relyingParty = try OpenIDTestAPI.addClient(api)
                var browser: OpenIDBrowser?
                var codeRounds = 0
                for round in 0..<rounds {
                    if browser == nil {
                        var fresh = OpenIDBrowser(api: api)
                        let device = ApprovingDevice(api: api, key: laptop, token: try api.accessToken(laptop))
                        _ = try OpenIDTestAPI.signIn(
                            &fresh, device: device, OpenIDTestAPI.authorization(relyingParty, pkce: try PKCE()))
                        browser = fresh
                    }
                    let signedIn = try #require(browser)
                    let cookie = try #require(signedIn.cookies.values.first { (try? session(api, $0)) != nil })
                    let expiry = try #require(try session(api, cookie)).expiresAt
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let pkce = try PKCE()
                    let parameters = OpenIDTestAPI.authorization(relyingParty, pkce: pkce, changes: ["prompt": "none"])
                    let bodies: [@Sendable () -> Outcome] = (0..<4).map { _ in
                        {
                            Outcome.of {
                                var copy = signedIn
                                return try copy.get("/authorize", query: parameters)
                            }
                        }
                    }
                    let outcomes = try race(bodies, clock: environment.clock)
                    var again = signedIn
                    let after = Outcome(
                        try again.get(
                            "/authorize",
                            query: OpenIDTestAPI.authorization(relyingParty, pkce: pkce, changes: ["prompt": "none"])))
                    let codes = (outcomes + [after]).compactMap(\.code)
                    let context = "round \(round): \(outcomes), then \(after)"

                    #expect(
                        (outcomes + [after]).map(\.status) == Array(repeating: 303, count: outcomes.count + 1),
                        "\(context)")
                    let understood = (outcomes + [after]).allSatisfy(\.isCodeOrLoginRequired)
                    #expect(understood, "\(context)")
                    if !outcomes.compactMap(\.code).isEmpty {
                        codeRounds += 1
                        // Each code came from a live session, which that request extended.
                        #expect(after.code != nil, "\(context): a code was issued from a session that is gone")
                        #expect(try session(api, cookie) != nil, "\(context)")
                    } else {
                        #expect(after.code == nil, "\(context)")
                    }
                    for code in codes {
                        let redeemed = try OpenIDTestAPI.redeem(api, relyingParty, code: code, verifier: pkce.verifier)
                        #expect(redeemed.status == 200, "\(context): \(redeemed.text)")
                    }
                    if after.code == nil { browser = nil }
                }
                #expect(codeRounds > 0 && codeRounds < rounds, "\(codeRounds) with codes")
            }
        }

        /// A signed-in browser one second before its session's idle expiry sends `/authorize`
        /// with `prompt=none`; right after its `step`-th clock reading the expiry comes, and the
        /// same browser's second `/authorize` runs to its end, for every reading the first makes.
        static func authorizeSweep(on backend: StorageContractBackend) throws {
            try withServer(on: backend, { $0.threads = 4 }) { environment, api, stepping in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                let relyingParty = try OpenIDTestAPI.addClient(api)
                let pkce = try PKCE()
                let parameters = OpenIDTestAPI.authorization(relyingParty, pkce: pkce, changes: ["prompt": "none"])
                var readings = 0
                var step = 0
                var rounds: [String] = []
                while step <= readings || readings == 0 {
                    var browser = OpenIDBrowser(api: api)
                    let device = ApprovingDevice(api: api, key: laptop, token: try api.accessToken(laptop))
                    _ = try OpenIDTestAPI.signIn(
                        &browser, device: device, OpenIDTestAPI.authorization(relyingParty, pkce: try PKCE()))
                    let signedIn = browser
                    let cookie = try #require(signedIn.cookies.values.first { (try? session(api, $0)) != nil })
                    let expiry = try #require(try session(api, cookie)).expiresAt
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let second = OutcomeCell()
                    let before = stepping.count
                    if step == 0 && readings > 0 { environment.clock.advance(by: 1) }
                    stepping.step(atReading: readings == 0 ? 0 : step) {
                        var copy = signedIn
                        let outcome = Outcome.of { try copy.get("/authorize", query: parameters) }
                        second.set(outcome)
                    }
                    var first = signedIn
                    let firstOutcome = Outcome(try first.get("/authorize", query: parameters))
                    stepping.step(atReading: 0)
                    if readings == 0 {
                        readings = stepping.count - before
                        #expect(firstOutcome.code != nil, "\(firstOutcome)")
                        continue
                    }
                    environment.clock.advance(by: max(expiry - environment.clock.now, 0))
                    let secondOutcome = second.value
                    var again = signedIn
                    let after = Outcome(try again.get("/authorize", query: parameters))
                    let outcomes = [firstOutcome] + (secondOutcome.map { [$0] } ?? [])
                    let context = "step \(step) of \(readings): \(outcomes), then \(after)"
                    rounds.append(outcomes.map(\.description).joined(separator: " + "))

                    let understood = (outcomes + [after]).allSatisfy(\.isCodeOrLoginRequired)
                    #expect(understood, "\(context)")
                    if !outcomes.compactMap(\.code).isEmpty {
                        #expect(after.code != nil, "\(context): a code was issued from a session that is gone")
                    } else {
                        #expect(after.code == nil, "\(context)")
                    }
                    for code in outcomes.compactMap(\.code) {
                        let redeemed = try OpenIDTestAPI.redeem(api, relyingParty, code: code, verifier: pkce.verifier)
                        #expect(redeemed.status == 200, "\(context): \(redeemed.text)")
                    }
                    step += 1
                }
                // The second request ran at every reading but the last few, which come after the
                // answer is decided; both answers were met.
                let coded = rounds.filter { $0.contains("code") }.count
                #expect(coded > 0 && coded < rounds.count, "\(rounds)")
            }
        }

        /// The pages that sign a browser in by approval, each with a waiting page.
        enum BrowserSignInPage: Sendable {
            /// The account page's sign-in (PROTOCOL.md section 9).
            case accountPage
            /// `/authorize`'s sign-in for a relying party (section 10).
            case authorize
        }

        /// A browser's sign-in per round, its request one second from its expiry; two approvals
        /// and a denial by the user's laptop and the waiting page's status poll race the clock's
        /// step past it. Then the page does what its script does: polls again two seconds later
        /// and, the state being no longer pending, posts Continue.
        static func browserSignInRace(on backend: StorageContractBackend, through page: BrowserSignInPage) throws {
            try withServer(
                on: backend,
                {
                    $0.signInLifetime = 60
                    $0.registrationLimit = 100_000
                }
            ) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                let relyingParty = try OpenIDTestAPI.addClient(api)
                var answeredRounds = 0
                for round in 0..<rounds {
                    var browser = OpenIDBrowser(api: api)
                    let pkce = try PKCE()
                    let (continuePath, continueForm) = try startBrowserSignIn(
                        &browser, through: page, relyingParty: relyingParty, pkce: pkce)
                    let waitingCookie = try #require(browser.cookies.values.first { (try? session(api, $0)) != nil })
                    let id = try #require(try session(api, waitingCookie)?.signInRequestID)
                    let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let assertions = try (0..<2).map { _ in try api.approvalAssertion(laptop, id: id) }
                    var bodies: [@Sendable () -> Outcome] = assertions.map { assertion in
                        { Outcome.of { try api.answer(id, decision: "approve", assertion: assertion, token: token) } }
                    }
                    bodies.append { Outcome.of { try api.answer(id, decision: "deny", assertion: nil, token: token) } }
                    let waiting = browser
                    bodies.append {
                        Outcome.of {
                            var copy = waiting
                            return try copy.get("/account/sign-in/status")
                        }
                    }
                    let outcomes = try race(bodies, clock: environment.clock)
                    // The waiting page's next poll, then its Continue.
                    environment.clock.advance(by: 2)
                    let poll = Outcome(try browser.get("/account/sign-in/status"))
                    let continued = try browser.post(continuePath, form: continueForm)
                    let answers = Array(outcomes[0..<3])
                    let stored = try #require(try api.storage.signInRequest(id: id))
                    let polls = [outcomes[3], poll].map { $0.json?["status"]?.stringValue ?? $0.description }
                    var context = "round \(round): answers \(answers), polls \(polls), "
                    context += "continue \(Outcome(continued)) \(continued.text.prefix(200)), stored \(stored.status)"

                    let answered = (outcomes + [poll, Outcome(continued)]).allSatisfy(\.isAnsweredWithoutServerError)
                    #expect(answered, "\(context)")
                    let accepted = answers.filter(\.isSuccess)
                    #expect(accepted.count <= 1, "\(context)")
                    if !accepted.isEmpty { answeredRounds += 1 }
                    for answer in answers where answer.status != 200 {
                        #expect(["already_answered", "expired_token"].contains(answer.error), "\(context)")
                    }
                    if let answeredAt = stored.answeredAt {
                        #expect(answeredAt < expiry, "\(context): answered at \(answeredAt), expired at \(expiry)")
                    }
                    let told = accepted.first?.json?["status"]?.stringValue ?? "expired"
                    #expect(poll.json?["status"]?.stringValue == told, "\(context): the device was told \(told)")
                    try expectBrowser(
                        continued, through: page, told: told, browser: &browser, relyingParty: relyingParty,
                        pkce: pkce, context: context)
                    // The waiting session's id opens nothing after the answer was collected.
                    #expect(try session(api, waitingCookie) == nil, "\(context)")
                    // Past the per-address and per-user hourly limits of browser sign-ins.
                    environment.clock.advance(by: 900)
                }
                #expect(answeredRounds > 0 && answeredRounds < rounds, "\(answeredRounds) answered")
            }
        }

        /// Opens `page`'s sign-in form in `browser` and submits it for alice; returns where the
        /// waiting page posts Continue, and its form.
        static func startBrowserSignIn(
            _ browser: inout OpenIDBrowser, through page: BrowserSignInPage, relyingParty: RelyingParty, pkce: PKCE
        ) throws -> (path: String, form: [(String, String)]) {
            switch page {
            case .accountPage:
                let form = try browser.get("/account")
                let started = try browser.post(
                    "/account/sign-in",
                    form: [("user", "alice"), ("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text))])
                #expect(started.status == 303, "\(started.text)")
                let waiting = try browser.get("/account")
                return ("/account/sign-in/continue", [("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text))])
            case .authorize:
                let form = try OpenIDTestAPI.startSignIn(
                    &browser, OpenIDTestAPI.authorization(relyingParty, pkce: pkce))
                return ("/authorize/continue", form)
            }
        }

        /// Checks that the browser's Continue on `page` ended as the device was `told`: signed in
        /// (a code that redeems, for `/authorize`), denied, or expired when nobody answered.
        static func expectBrowser(
            _ continued: HTTPResponse, through page: BrowserSignInPage, told: String, browser: inout OpenIDBrowser,
            relyingParty: RelyingParty, pkce: PKCE, context: String
        ) throws {
            switch page {
            case .accountPage:
                let final = try browser.get("/account")
                let signedIn = final.text.contains(">Sign out</button>")
                #expect(signedIn == (told == "approved"), "\(context)")
                switch told {
                case "approved": #expect(continued.status == 303, "\(context)")
                case "denied": #expect(continued.text.contains("denied on your device"), "\(context)")
                default: #expect(continued.text.contains("request expired"), "\(context)")
                }
            case .authorize:
                // Always back to the relying party, with a code or an error.
                #expect(continued.status == 303, "\(context)")
                let parameters = (try? OpenIDTestAPI.redirect(continued))?.parameters ?? [:]
                switch told {
                case "approved":
                    #expect(parameters["code"] != nil, "\(context): the device was told approved")
                    if let code = parameters["code"] {
                        let redeemed = try OpenIDTestAPI.redeem(
                            browser.api, relyingParty, code: code, verifier: pkce.verifier)
                        #expect(redeemed.status == 200, "\(context): \(redeemed.text)")
                    }
                case "denied":
                    #expect(parameters["error"] == "access_denied", "\(context)")
                    #expect(parameters["error_description"]?.contains("denied") == true, "\(context)")
                default:
                    #expect(parameters["error"] == "access_denied", "\(context)")
                    #expect(parameters["error_description"]?.contains("expired") == true, "\(context)")
                }
            }
        }

        /// A signed-in account page asks for new recovery codes each round, the request one
        /// second from its expiry; two approvals and a denial by the user's laptop and the page's
        /// `Show the new codes` race the clock's step past it. Then the person clicks that button
        /// (again) two seconds later, as one does after answering on the device.
        static func recoveryCodesRace(on backend: StorageContractBackend) throws {
            try withServer(
                on: backend,
                {
                    $0.signInLifetime = 60
                    $0.recoveryCodeIterations = 1000
                }
            ) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                var browser = try signedInAtTheAccountPage(api, laptop: laptop)
                var answeredRounds = 0
                for round in 0..<rounds {
                    let csrf = try OpenIDTestAPI.hidden("csrf", in: try browser.get("/account").text)
                    let asked = try browser.post("/account/recovery-codes", form: [("csrf", csrf)])
                    #expect(asked.status == 303, "round \(round): \(asked.text.prefix(200))")
                    let id = try OpenIDTestAPI.hidden("request", in: try browser.get("/account").text)
                    let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
                    let before = try api.storage.unusedRecoveryCodes(user: "alice")
                    let setsBefore = try madeRecoveryCodeSets(api)
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let assertions = try (0..<2).map { _ in try api.approvalAssertion(laptop, id: id) }
                    var bodies: [@Sendable () -> Outcome] = assertions.map { assertion in
                        { Outcome.of { try api.answer(id, decision: "approve", assertion: assertion, token: token) } }
                    }
                    bodies.append { Outcome.of { try api.answer(id, decision: "deny", assertion: nil, token: token) } }
                    let page = browser
                    let show = [("csrf", csrf), ("request", id)]
                    bodies.append {
                        Outcome.of {
                            var copy = page
                            return try copy.post("/account/recovery-codes/show", form: show)
                        }
                    }
                    let outcomes = try race(bodies, clock: environment.clock)
                    // The person clicks Show a moment after answering on the device.
                    environment.clock.advance(by: 2)
                    let late = Outcome(try browser.post("/account/recovery-codes/show", form: show))
                    let answers = Array(outcomes[0..<3])
                    let shows = [outcomes[3], late]
                    let seen = shows.map(recoveryCodesPage)
                    let stored = try #require(try api.storage.signInRequest(id: id))
                    let after = try api.storage.unusedRecoveryCodes(user: "alice")
                    let made = try madeRecoveryCodeSets(api) - setsBefore
                    let context = "round \(round): answers \(answers), pages \(seen), stored \(stored.status)"

                    let answered = (outcomes + [late]).allSatisfy(\.isAnsweredWithoutServerError)
                    #expect(answered, "\(context)")
                    let accepted = answers.filter(\.isSuccess)
                    #expect(accepted.count <= 1, "\(context)")
                    if !accepted.isEmpty { answeredRounds += 1 }
                    for answer in answers where answer.status != 200 {
                        #expect(["already_answered", "expired_token"].contains(answer.error), "\(context)")
                    }
                    if let answeredAt = stored.answeredAt {
                        #expect(answeredAt < expiry, "\(context): answered at \(answeredAt), expired at \(expiry)")
                    }
                    switch accepted.first?.json?["status"]?.stringValue {
                    case "approved":
                        // One set, shown once, stored in place of the old one.
                        #expect(seen.filter { $0 == "codes" }.count == 1, "\(context): the device was told approved")
                        #expect(["codes", "shown already"].contains(seen[1]), "\(context)")
                        #expect(made == 1, "\(context): \(made) sets made")
                        #expect(after.count == RecoveryCodes.count && after != before, "\(context)")
                    case "denied":
                        #expect(seen[1] == "denied", "\(context): the device was told denied")
                        // A page that read the request still pending once the clock had stepped
                        // past its expiry (the denial read the clock before, and committed after)
                        // says it expired: true at its reading, and nothing is made either way.
                        #expect(["not approved yet", "denied", "expired"].contains(seen[0]), "\(context)")
                        #expect(made == 0 && after == before, "\(context)")
                    default:
                        #expect(accepted.isEmpty, "\(context)")
                        #expect(seen[1] == "expired", "\(context)")
                        #expect(["not approved yet", "expired"].contains(seen[0]), "\(context)")
                        #expect(made == 0 && after == before, "\(context)")
                    }
                    // Past the hourly limit of the page's requests (10), within the session's idle time.
                    environment.clock.advance(by: 340)
                }
                #expect(answeredRounds > 0 && answeredRounds < rounds, "\(answeredRounds) answered")
            }
        }

        /// A browser signed in at the account page by `laptop`'s approval.
        static func signedInAtTheAccountPage(_ api: TestAPI, laptop: RSAPrivateKey) throws -> OpenIDBrowser {
            var browser = OpenIDBrowser(api: api)
            let form = try OpenIDTestAPI.hidden("csrf", in: try browser.get("/account").text)
            _ = try browser.post("/account/sign-in", form: [("user", "alice"), ("csrf", form)])
            let waiting = try browser.get("/account")
            let cookie = try #require(browser.cookies.values.first { (try? session(api, $0)) != nil })
            let id = try #require(try session(api, cookie)?.signInRequestID)
            let approved = try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id),
                token: try api.accessToken(laptop))
            #expect(approved.status == 200, "\(approved.text)")
            let continued = try browser.post(
                "/account/sign-in/continue", form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text))])
            #expect(continued.status == 303, "\(continued.text.prefix(200))")
            return browser
        }

        /// How many sets of recovery codes were made so far, as the audit trail counts them.
        static func madeRecoveryCodeSets(_ api: TestAPI) throws -> Int {
            try api.storage.auditEvents(since: 0).filter { $0.action == .recoveryCodes }.count
        }

        /// What a `Show the new codes` answer showed: `codes` (the whole set), or its message.
        static func recoveryCodesPage(_ outcome: Outcome) -> String {
            let messages = [
                "not approved yet": "Not approved yet", "denied": "denied on your device", "expired": "request expired",
                "shown already": "shown already", "no longer usable": "can no longer be used",
            ]
            if outcome.text.components(separatedBy: "<li><code>").count == RecoveryCodes.count + 1 { return "codes" }
            return messages.first { outcome.text.contains($0.value) }?.key ?? outcome.description
        }

        // MARK: Helpers

        /// The stored browser session a cookie value names.
        static func session(_ api: TestAPI, _ cookie: String) throws -> BrowserSessionRecord? {
            try api.storage.browserSession(idHash: try BrowserSessions.hash(cookie))
        }

        /// Runs `body` with a server on a socket, on a fresh database of `backend`, whose clock
        /// is the environment's test clock read through a ``SteppingClock``.
        static func withServer(
            on backend: StorageContractBackend, _ configure: (inout ServerConfiguration) -> Void = { _ in },
            _ body: (TestEnvironment, TestAPI, SteppingClock) throws -> Void
        ) throws {
            let database = try backend.makeDatabase()
            defer { database.destroy() }
            let environment = TestEnvironment()
            let stepping = SteppingClock(environment.clock)
            let runner = try ServerRunner(
                configuration: try environment.configuration {
                    $0.failureLimit = 100_000
                    configure(&$0)
                },
                storage: try environment.seedSigningKey(try database.open()), log: SilentLog(), now: stepping.closure)
            defer { runner.stop() }
            try body(environment, environment.socketAPI(runner), stepping)
        }

        /// Runs `bodies` at once, each on a thread of its own after a random pause of up to
        /// `spread` microseconds, while one more thread moves `clock` one second on after a pause
        /// of up to 20 ms (``runConcurrently(_:timeout:_:)``); returns their outcomes in order.
        /// With several requests racing one step, a wider spread keeps the first of them from
        /// coming before the step nearly every time.
        static func race(
            _ bodies: [@Sendable () -> Outcome], clock: TestClock, spread: UInt32 = 20_000,
            stepDelay: ClosedRange<UInt32> = 0...20_000
        ) throws -> [Outcome] {
            // The last participant is the clock's step.
            let finished = runConcurrently(bodies.count + 1, timeout: 60) { index throws(StorageError) -> Outcome? in
                usleep(index < bodies.count ? UInt32.random(in: 0...spread) : UInt32.random(in: stepDelay))
                guard index < bodies.count else {
                    clock.advance(by: 1)
                    return nil
                }
                return bodies[index]()
            }
            do {
                // Without the clock's step, the one participant that has no outcome.
                return try finished.map { try $0.get() }.compactMap { $0 }
            } catch {
                throw TestFailure("a racing request did not finish: \(error)")
            }
        }
    }

    /// The server's clock in these tests: the test clock, moved one second on right after a
    /// chosen reading, so that a sweep over that reading puts the expiry between every two
    /// readings one request makes (between a check and the write it guards, among others).
    ///
    /// An action given with the step runs at that moment, on the thread that read the clock,
    /// before the reading is returned: another request made there fits entirely between the
    /// reading and whatever the reader does next.
    final class SteppingClock: Sendable {
        let clock: TestClock
        private let readingsLeft = Atomic<Int>(0)
        private let readings = Atomic<Int>(0)
        private let action = Mutex<(@Sendable () -> Void)?>(nil)

        init(_ clock: TestClock) {
            self.clock = clock
        }

        /// The clock as the server takes it.
        var closure: @Sendable () -> Int64 {
            { [self] in self.read() }
        }

        /// How many times the server read the clock so far.
        var count: Int { readings.load(ordering: .relaxed) }

        /// Moves the clock one second on right after the `reading`-th reading from now, and
        /// runs `action` then; 0 disarms it.
        func step(atReading reading: Int, then action: (@Sendable () -> Void)? = nil) {
            self.action.withLock { $0 = action }
            readingsLeft.store(reading, ordering: .relaxed)
        }

        private func read() -> Int64 {
            readings.wrappingAdd(1, ordering: .relaxed)
            let time = clock.now
            if readingsLeft.wrappingSubtract(1, ordering: .relaxed).newValue == 0 {
                clock.advance(by: 1)
                action.withLock { $0 }?()
            }
            return time
        }
    }

    /// Holds the outcome of a request made on another thread.
    final class OutcomeCell: Sendable {
        private let stored = Mutex<Outcome?>(nil)

        var value: Outcome? { stored.withLock { $0 } }

        func set(_ outcome: Outcome) {
            stored.withLock { $0 = outcome }
        }
    }

    /// What one racing request got: its status and the parts the checks read.
    struct Outcome: Sendable, CustomStringConvertible {
        let status: Int
        let error: String?
        let json: JSONValue?
        /// The `Location` of a redirect.
        let location: String?
        /// The body, as text (a page's).
        let text: String

        init(_ response: HTTPResponse) {
            status = response.status
            error = response.errorCode
            json = response.json
            location = response.headers["Location"]
            text = response.text
        }

        init(failure: any Error) {
            status = -1
            error = "\(failure)"
            json = nil
            location = nil
            text = ""
        }

        /// The outcome of `send`, or of the error it threw (status -1: no answer at all).
        static func of(_ send: () throws -> HTTPResponse) -> Outcome {
            do {
                return Outcome(try send())
            } catch {
                return Outcome(failure: error)
            }
        }

        private var redirectParameters: [String: String] {
            guard let query = location?.split(separator: "?", maxSplits: 1).dropFirst().first else { return [:] }
            return (try? FormURLEncoding.decode(Array(query.utf8))) ?? [:]
        }

        /// Whether the answer is a 200.
        var isSuccess: Bool { status == 200 }
        /// Whether an answer came, and it is not a 5xx.
        var isAnsweredWithoutServerError: Bool { status > 0 && status < 500 }
        /// Whether the answer is a token response.
        var hasAccessToken: Bool { json?["access_token"]?.stringValue != nil }
        /// Whether the answer is an authorization redirect with a code or `login_required`.
        var isCodeOrLoginRequired: Bool { code != nil || redirectError == "login_required" }

        /// The `code` of an authorization redirect.
        var code: String? { redirectParameters["code"] }
        /// The `error` of an authorization redirect.
        var redirectError: String? { redirectParameters["error"] }

        var description: String {
            status == 303 ? "303 \(code == nil ? redirectError ?? "?" : "code")" : "\(status) \(error ?? "")"
        }
    }
}
