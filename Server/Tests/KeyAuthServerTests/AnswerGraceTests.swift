import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// The one rule for an answer given in time (``SignInRequests/answerGrace``), on each way it
    /// is collected: a client's poll (CIBA), a browser's sign-in, the account page's new recovery
    /// codes. An answer given before the request's expiry is collected until its last second
    /// within the grace, and from the grace's end it is expired, as an unanswered request is
    /// from its own expiry.
    ///
    /// Over sockets with the server's clock injected (``ExpiryRaceTests/withServer(on:_:_:)``),
    /// on SQLite and PostgreSQL; nested in ``StorageContractTests`` to share its `.serialized`
    /// trait, as the expiry races are.
    @Suite("An answer given in time is collected until the grace ends, on each way in", .timeLimit(.minutes(5)))
    struct AnswerGraceTests {
        @Test("a push sign-in's answer: collected in the grace's last second, expired_token at its end")
        func pushSignInSQLite() throws {
            try Self.pushSignIn(on: .sqlite)
        }

        @Test(
            "a push sign-in's answer within and after the grace, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, ExpiryRaceTests.postgresReason))
        func pushSignInPostgres() throws {
            try Self.pushSignIn(on: try #require(StorageContractBackend.postgres))
        }

        @Test("new recovery codes approved in time: shown in the grace's last second, none at its end")
        func recoveryCodesSQLite() throws {
            try Self.recoveryCodes(on: .sqlite)
        }

        @Test(
            "new recovery codes approved in time, within and after the grace, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, ExpiryRaceTests.postgresReason))
        func recoveryCodesPostgres() throws {
            try Self.recoveryCodes(on: try #require(StorageContractBackend.postgres))
        }

        @Test("an account page sign-in approved in time: signed in in the grace's last second, expired at its end")
        func browserSignInSQLite() throws {
            try Self.browserSignIn(on: .sqlite)
        }

        @Test(
            "an account page sign-in approved in time, within and after the grace, on PostgreSQL",
            .enabled(if: StorageContractBackend.postgres != nil, ExpiryRaceTests.postgresReason))
        func browserSignInPostgres() throws {
            try Self.browserSignIn(on: try #require(StorageContractBackend.postgres))
        }

        /// A client's requests, each answered in its last second and polled for the first time
        /// `late` seconds past its expiry: the answer in the grace's last second, `expired_token`
        /// from its end, and nothing issued then.
        static func pushSignIn(on backend: StorageContractBackend) throws {
            try ExpiryRaceTests.withServer(on: backend, { $0.signInLifetime = 60 }) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                let client = try api.addClient()
                let grace = SignInRequests.answerGrace
                let cases: [(decision: String, late: Int64, expected: String)] = [
                    ("approve", grace - 1, "token"), ("approve", grace, "expired_token"),
                    ("deny", grace - 1, "access_denied"), ("deny", grace, "expired_token"),
                ]
                for (decision, late, expected) in cases {
                    let id = try api.startSignIn(client, user: "alice")
                    let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let assertion = decision == "approve" ? try api.approvalAssertion(laptop, id: id) : nil
                    let answer = try api.answer(id, decision: decision, assertion: assertion, token: token)
                    #expect(answer.status == 200, "\(decision): \(answer.text)")
                    environment.clock.advance(by: expiry + late - environment.clock.now)

                    let poll = try api.poll(client, id: id)
                    let context =
                        "\(decision), polled \(late) s past the expiry: \(poll.status) \(poll.text.prefix(200))"
                    let got = poll.json?["access_token"]?.stringValue != nil ? "token" : poll.errorCode
                    #expect(got == expected, "\(context)")
                    let answered: SignInRequestStatus = decision == "approve" ? .approved : .denied
                    let stored = try #require(try api.storage.signInRequest(id: id)).status
                    #expect(stored == (expected == "token" ? .issued : answered), "\(context): stored \(stored)")
                    // The next poll, past the grace: collected once, or expired.
                    environment.clock.advance(by: 10)
                    let again = try api.poll(client, id: id)
                    #expect(again.errorCode == (expected == "token" ? "invalid_grant" : "expired_token"), "\(context)")
                }
            }
        }

        /// A signed-in account page asks for new recovery codes, approved in the request's last
        /// second, and clicks `Show the new codes` `late` seconds past its expiry: the codes in the
        /// grace's last second; at its end "expired", no set made, and the approval unused.
        static func recoveryCodes(on backend: StorageContractBackend) throws {
            try ExpiryRaceTests.withServer(
                on: backend,
                {
                    $0.signInLifetime = 60
                    $0.recoveryCodeIterations = 1000
                }
            ) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                var browser = try ExpiryRaceTests.signedInAtTheAccountPage(api, laptop: laptop)
                for late in [SignInRequests.answerGrace - 1, SignInRequests.answerGrace] {
                    let csrf = try OpenIDTestAPI.hidden("csrf", in: try browser.get("/account").text)
                    let asked = try browser.post("/account/recovery-codes", form: [("csrf", csrf)])
                    #expect(asked.status == 303, "\(asked.text.prefix(200))")
                    let id = try OpenIDTestAPI.hidden("request", in: try browser.get("/account").text)
                    let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
                    let before = try api.storage.unusedRecoveryCodes(user: "alice")
                    let setsBefore = try ExpiryRaceTests.madeRecoveryCodeSets(api)
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let answer = try api.answer(
                        id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
                    #expect(answer.status == 200, "\(answer.text)")
                    environment.clock.advance(by: expiry + late - environment.clock.now)

                    let shown = try browser.post(
                        "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
                    let page = ExpiryRaceTests.recoveryCodesPage(Outcome(shown))
                    let made = try ExpiryRaceTests.madeRecoveryCodeSets(api) - setsBefore
                    let after = try api.storage.unusedRecoveryCodes(user: "alice")
                    let stored = try #require(try api.storage.signInRequest(id: id))
                    let context = "Show \(late) s past the expiry: \(page), \(made) sets made, stored \(stored.status)"
                    if late < SignInRequests.answerGrace {
                        #expect(shown.status == 200 && page == "codes", "\(context)")
                        #expect(made == 1 && after.count == RecoveryCodes.count && after != before, "\(context)")
                        #expect(stored.status == .issued, "\(context)")
                    } else {
                        #expect(shown.status == 400 && page == "expired", "\(context)")
                        #expect(made == 0 && after == before, "\(context)")
                        #expect(stored.status == .approved, "\(context)")
                    }
                }
            }
        }

        /// The account page's sign-in, approved in the request's last second, continued `late`
        /// seconds past its expiry: signed in in the grace's last second; at its end the waiting
        /// session is over, the status `expired` and the page the sign-in form.
        static func browserSignIn(on backend: StorageContractBackend) throws {
            try ExpiryRaceTests.withServer(on: backend, { $0.signInLifetime = 60 }) { environment, api, _ in
                let laptop = try ServerTestKeys.key("alice-1")
                _ = try api.activeDevice(user: "alice", key: laptop)
                for late in [SignInRequests.answerGrace - 1, SignInRequests.answerGrace] {
                    var browser = OpenIDBrowser(api: api)
                    let form = try OpenIDTestAPI.hidden("csrf", in: try browser.get("/account").text)
                    _ = try browser.post("/account/sign-in", form: [("user", "alice"), ("csrf", form)])
                    let waiting = try browser.get("/account")
                    let csrf = try OpenIDTestAPI.hidden("csrf", in: waiting.text)
                    let cookie = try #require(
                        browser.cookies.values.first { (try? ExpiryRaceTests.session(api, $0)) != nil })
                    let id = try #require(try ExpiryRaceTests.session(api, cookie)?.signInRequestID)
                    let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
                    let token = try api.accessToken(laptop)
                    environment.clock.advance(by: expiry - 1 - environment.clock.now)
                    let answer = try api.answer(
                        id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
                    #expect(answer.status == 200, "\(answer.text)")
                    environment.clock.advance(by: expiry + late - environment.clock.now)

                    let status = try browser.get("/account/sign-in/status").json?["status"]?.stringValue
                    let continued = try browser.post("/account/sign-in/continue", form: [("csrf", csrf)])
                    let page = try browser.get("/account").text
                    let stored = try #require(try api.storage.signInRequest(id: id))
                    let context =
                        "continued \(late) s past the expiry: status \(status ?? "-"), stored \(stored.status)"
                    #expect(continued.status == 303, "\(context): \(continued.text.prefix(200))")
                    if late < SignInRequests.answerGrace {
                        #expect(status == "approved", "\(context)")
                        #expect(page.contains(">Sign out</button>"), "\(context)")
                        #expect(stored.status == .issued, "\(context)")
                    } else {
                        #expect(status == "expired", "\(context)")
                        #expect(page.contains("name=\"user\"") && !page.contains(">Sign out</button>"), "\(context)")
                        #expect(stored.status == .approved, "\(context)")
                    }
                }
            }
        }
    }
}
