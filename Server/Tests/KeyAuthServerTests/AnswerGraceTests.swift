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
