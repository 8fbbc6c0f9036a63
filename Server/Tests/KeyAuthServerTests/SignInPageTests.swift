import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The sign-in pages' heading, their way back from a mistyped user name, and the pages' icon,
/// over HTTP through the responder.
@Suite("Sign-in pages: the application's name, Use another name, the icon", .timeLimit(.minutes(5)))
struct SignInPageTests {
    /// Whether `page` shows the sign-in form with an empty user-name field.
    static func isEmptySignInForm(_ page: String) -> Bool {
        page.contains("name=\"user\"") && page.contains("maxlength=\"64\" autofocus>")
    }

    @Test("the account page: Not USER? Use another name ends the waiting session and shows the form again")
    func accountPageAnotherName() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        var browser = OpenIDBrowser(api: api)
        let form = try browser.get("/account")
        #expect(form.text.contains("<h1>keyauth account</h1>"))
        #expect(!form.text.contains("application-name"))
        #expect(Self.isEmptySignInForm(form.text))
        let started = try browser.post(
            "/account/sign-in", form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text)), ("user", "alcie")])
        #expect(started.status == 303)
        let waiting = try browser.get("/account")
        #expect(waiting.text.contains("Not <strong>alcie</strong>?"))
        #expect(waiting.text.contains("name=\"another_user\" value=\"1\" class=\"link\">Use another name</button>"))
        let sessionCSRF = try OpenIDTestAPI.hidden("csrf", in: waiting.text)
        #expect(browser.cookies["__Host-keyauth-session"] != nil)

        // Another site's post, or a wrong token, ends nothing.
        #expect(
            try browser.forgedPostStatuses("/account/sign-in", form: [("csrf", sessionCSRF), ("another_user", "1")])
                == [403, 403, 403])
        #expect(try browser.get("/account").text.contains("id=\"binding-code\""))

        let back = try browser.post("/account/sign-in", form: [("csrf", sessionCSRF), ("another_user", "1")])
        #expect(back.status == 303)
        #expect(back.headers["Location"] == "/account")
        #expect(browser.cookies["__Host-keyauth-session"] == nil)
        let again = try browser.get("/account")
        #expect(Self.isEmptySignInForm(again.text))
        #expect(!again.text.contains("id=\"binding-code\""))
        // And the form works as the first time.
        let retried = try browser.post(
            "/account/sign-in", form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: again.text)), ("user", "alice")])
        #expect(retried.status == 303)
        #expect(try browser.get("/account").text.contains("Not <strong>alice</strong>?"))
    }

    @Test("Cancel, or Use another name, withdraws the sign-in request: no device lists it or can approve it")
    func abandonedSignInIsWithdrawn() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        for (path, extra) in [("/account/sign-in/cancel", []), ("/account/sign-in", [("another_user", "1")])] {
            var browser = OpenIDBrowser(api: api)
            let form = try browser.get("/account")
            let started = try browser.post(
                "/account/sign-in",
                form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text)), ("user", "alice")])
            #expect(started.status == 303)
            let waiting = try browser.get("/account")
            let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
            #expect(listed.count == 1, "\(path)")
            let id = try #require(listed.first?["id"]?.stringValue)
            let ended = try browser.post(
                path, form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text))] + extra)
            #expect(ended.status == 303, "\(path)")
            #expect(try api.openRequests(token: token).json?["requests"]?.arrayValue?.isEmpty == true, "\(path)")
            let late = try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
            #expect(late.status == 400 && late.errorCode == "expired_token", "\(path): \(late.text)")
            #expect(try api.storage.signInRequest(id: id)?.answeredAt == nil, "\(path)")
        }
    }

    @Test(
        "an OpenID sign-in names the application in the heading, and Use another name keeps its authorization going"
    )
    func openIDSignInAnotherName() throws {
        let environment = TestEnvironment()
        // The provider's pages need the server's full setup, as the provider's own tests use;
        // its issuer is plain http, so the cookie has no __Host- prefix.
        let runner = try environment.startServer { $0.failureLimit = 1000 }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let laptop = try ServerTestKeys.key("alice-1")
        let device = ApprovingDevice(api: api, key: laptop, token: try api.activeDevice(user: "alice", key: laptop))
        let client = try OpenIDTestAPI.addClient(api, name: "Team Wiki")
        let parameters = OpenIDTestAPI.authorization(client, pkce: try PKCE())
        var browser = OpenIDBrowser(api: api)
        let form = try browser.get("/authorize", query: parameters)
        #expect(form.status == 200)
        let heading =
            "<h1><span id=\"application-name\">Team Wiki</span> <span class=\"via\">· sign in with keyauth</span></h1>"
        #expect(form.text.contains(heading))
        let reference = try OpenIDTestAPI.hidden("authorization", in: form.text)
        // Posts `path` as a form of `page` does: its CSRF token and pending authorization, and
        // `field`.
        func submit(_ path: String, from page: HTTPResponse, _ field: (String, String)) throws -> HTTPResponse {
            try browser.post(
                path,
                form: [
                    ("csrf", try OpenIDTestAPI.hidden("csrf", in: page.text)),
                    ("authorization", try OpenIDTestAPI.hidden("authorization", in: page.text)), field,
                ])
        }
        let waiting = try submit("/authorize/sign-in", from: form, ("user", "alcie"))
        #expect(waiting.status == 200)
        #expect(waiting.text.contains(heading))
        #expect(waiting.text.contains("Not <strong>alcie</strong>?"))
        #expect(browser.cookies["keyauth-session"] != nil)

        let back = try submit("/authorize/sign-in", from: waiting, ("another_user", "1"))
        #expect(back.status == 200)
        #expect(back.text.contains(heading))
        #expect(Self.isEmptySignInForm(back.text))
        #expect(browser.cookies["keyauth-session"] == nil)
        #expect(try OpenIDTestAPI.hidden("authorization", in: back.text) == reference)
        // The form still carries the pending authorization: alice signs in and the client
        // gets its code.
        let signedIn = try submit("/authorize/sign-in", from: back, ("user", "alice"))
        #expect(signedIn.status == 200)
        try device.answerNewest()
        let done = try submit("/authorize/continue", from: signedIn, ("decision", "continue"))
        let redirect = try OpenIDTestAPI.redirect(done)
        #expect(redirect.base == client.redirectURI)
        #expect(redirect.parameters["code"] != nil)
    }

    @Test("/favicon.svg is an SVG with a day's caching and the pages' headers, and every page links it")
    func favicon() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let icon = try api.send("GET", "/favicon.svg")
        #expect(icon.status == 200)
        #expect(icon.headers["Content-Type"] == "image/svg+xml")
        #expect(icon.headers["Cache-Control"] == "public, max-age=86400")
        #expect(icon.headers["X-Content-Type-Options"] == "nosniff")
        #expect(icon.headers["Content-Security-Policy"] == BrowserRequests.contentSecurityPolicy)
        #expect(icon.text.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 32 32\">"))
        #expect(icon.text.hasSuffix("</svg>\n"))
        #expect(!icon.text.contains("<script") && !icon.text.contains("href"))
        let head = try api.send("HEAD", "/favicon.svg")
        #expect(head.status == 200 && head.headers["Content-Type"] == "image/svg+xml")
        #expect(try api.send("POST", "/favicon.svg").status == 405)

        let page = try api.send("GET", "/account")
        #expect(page.text.contains("<link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\">"))
        // The page's policy lets it load: images from this origin.
        #expect(page.headers["Content-Security-Policy"]?.contains("img-src 'self'") == true)
    }
}
