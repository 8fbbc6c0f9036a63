import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// What a browser's sign-in through the OpenID provider must withstand beyond the code flow
/// itself: a consent answered long after max_age allowed it, a loopback port hidden from the
/// user, a cross-site form post that would replace the browser's cookies, a signed-in session
/// left alive by a sign-in again, and an approval that cannot complete.
extension OpenIDProviderTests {
    @Test("a consent page answered after the session outlived max_age asks for a sign-in, not a code")
    func consentAfterMaxAge() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let native = try OpenIDTestAPI.addClient(
            setup.api, name: "Native", redirect: "http://127.0.0.1/callback", logout: [], isPublic: true)
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: setup.api)
        let loopback = ["redirect_uri": "http://127.0.0.1:54321/callback"]
        let first = try setup.signIn(&browser, OpenIDTestAPI.authorization(native, pkce: pkce, changes: loopback))
        #expect(try OpenIDTestAPI.redirect(first).parameters["code"] != nil)
        setup.environment.clock.advance(by: 50)

        // The session is 50 s old and max_age=60: the consent page, which waits for the user.
        let asked = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(native, pkce: pkce, changes: loopback.merging(["max_age": "60"]) { $1 }))
        #expect(asked.text.contains("value=\"allow\""), "\(asked.status)")
        let allow = [
            ("csrf", try OpenIDTestAPI.hidden("csrf", in: asked.text)),
            ("authorization", try OpenIDTestAPI.hidden("authorization", in: asked.text)), ("decision", "allow"),
        ]
        // Five minutes later the sign-in is 350 s old: Allow gets the sign-in form, no code.
        setup.environment.clock.advance(by: 300)
        let late = try browser.post("/authorize/consent", form: allow)
        #expect(late.headers["Location"] == nil, "answered with \(late.headers["Location"] ?? "")")
        #expect(late.status == 200 && late.text.contains("name=\"user\""))
        #expect(late.text.contains("asks for a recent sign-in"))
        // That form is a sign-in like any other: the device approves it and the code comes.
        let reference = try OpenIDTestAPI.hidden("authorization", in: late.text)
        let waiting = try browser.post(
            "/authorize/sign-in",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: late.text)), ("authorization", reference),
                ("user", "alice"),
            ])
        #expect(waiting.status == 200)
        try setup.device.answerNewest()
        let done = try browser.post(
            "/authorize/continue",
            form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text)), ("authorization", reference)])
        #expect(try OpenIDTestAPI.redirect(done).parameters["code"] != nil)
        // The page was answered once: a second Allow gets no code (the session it was made for
        // was replaced by the sign-in, so its token is no longer the session's: 403).
        let second = try browser.post("/authorize/consent", form: allow)
        #expect([400, 403].contains(second.status) && second.headers["Location"] == nil, "\(second.status)")
    }

    @Test("max_age=0 asks for a sign-in even from a session signed in this same second")
    func maxAgeZero() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var (browser, _) = try setup.code(pkce: pkce)
        let again = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["max_age": "0"]))
        #expect(again.status == 200 && again.text.contains("name=\"user\""), "\(again.headers["Location"] ?? "")")
        let silent = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["max_age": "0", "prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(silent).parameters["error"] == "login_required")
    }

    @Test("a loopback redirect's port is shown on the sign-in page and on the device, not only its host")
    func loopbackPortShown() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let native = try OpenIDTestAPI.addClient(
            setup.api, name: "Native", redirect: "http://127.0.0.1/callback", logout: [], isPublic: true)
        var browser = OpenIDBrowser(api: setup.api)
        // prompt=login skips the consent page, which shows the port: the sign-in shows it too.
        let parameters = OpenIDTestAPI.authorization(
            native, pkce: try PKCE(),
            changes: ["redirect_uri": "http://127.0.0.1:40000/callback", "prompt": "login"])
        let form = try browser.get("/authorize", query: parameters)
        #expect(form.text.contains("Sign in to Native (redirects to 127.0.0.1:40000)."))
        _ = try OpenIDTestAPI.startSignIn(&browser, parameters)
        let listed = try #require(try setup.device.requests().last)
        #expect(listed["client_name"] == .string("Native (redirects to 127.0.0.1:40000)"))
        // A host on the network is shown without its port, as before.
        #expect(RedirectURI.host(of: "https://wiki.example.org:8443/cb") == "wiki.example.org")
    }

    @Test("a posted authorization request goes on as a GET or is refused: a cross-site post keeps cookies and session")
    func postedRequestBecomesGet() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var (browser, _) = try setup.code(pkce: pkce)
        // A sign-in page open in this browser, bound to its CSRF cookie.
        let open = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "login"]))
        let openForm = [
            ("csrf", try OpenIDTestAPI.hidden("csrf", in: open.text)),
            ("authorization", try OpenIDTestAPI.hidden("authorization", in: open.text)), ("user", "alice"),
        ]
        // Another site posts an authorization request: the browser sends no Lax cookie with it.
        var bare = OpenIDBrowser(api: setup.api)
        let parameters = OpenIDTestAPI.authorization(setup.client, pkce: pkce, state: "posted")
        let crossSite: HTTPHeaders = ["Origin": "https://rp.example", "Sec-Fetch-Site": "cross-site"]
        // What cannot go on as a GET (a query beside the form, a form too long for a URL) is
        // refused, and sets no cookie either.
        let withQuery = try bare.post("/authorize?x=1", form: parameters, headers: crossSite)
        #expect(withQuery.status == 400)
        #expect(withQuery.headers.values(for: "Set-Cookie").isEmpty)
        let long = try bare.post(
            "/authorize", form: parameters + [("login_hint", String(repeating: "a", count: 9000))], headers: crossSite)
        #expect(long.status == 400)
        #expect(long.headers.values(for: "Set-Cookie").isEmpty)
        #expect(long.text.contains("too long"))
        // A parameter the endpoint does not read goes nowhere, however long.
        let posted = try bare.post(
            "/authorize", form: parameters + [("pad", String(repeating: "a", count: 9000))], headers: crossSite)
        #expect(posted.status == 303)
        #expect(posted.headers.values(for: "Set-Cookie").isEmpty)
        let location = try #require(posted.headers["Location"])
        #expect(location.hasPrefix("/authorize?"))
        #expect(!location.contains("pad="))
        // The GET, with the browser's cookies, finds the session: a code at once.
        let followed = try browser.get(location)
        let (_, answer) = try OpenIDTestAPI.redirect(followed)
        #expect(answer["code"] != nil && answer["state"] == "posted")
        // The page opened before still works: its cookie was not replaced.
        #expect(try browser.post("/authorize/sign-in", form: openForm).status == 200)
    }

    @Test("a sign-in again ends the browser's earlier session, which a copied cookie would otherwise keep")
    func signInAgainEndsEarlierSession() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var (browser, _) = try setup.code(pkce: pkce)
        let copied = browser
        var thief = copied
        #expect(try setup.isSignedIn(&thief))
        // prompt=login: the user signs in again; the session the copy holds ends.
        let again = try setup.signIn(
            &browser, OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "login"]))
        #expect(try OpenIDTestAPI.redirect(again).parameters["code"] != nil)
        var stale = copied
        #expect(try !setup.isSignedIn(&stale))
        #expect(try setup.isSignedIn(&browser))
    }

    @Test("an approved sign-in that cannot complete (its device revoked) sends access_denied to the client")
    func approvalThatCannotComplete() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        var browser = OpenIDBrowser(api: setup.api)
        let continueForm = try OpenIDTestAPI.startSignIn(
            &browser, OpenIDTestAPI.authorization(setup.client, pkce: try PKCE(), state: "s-revoked"))
        try setup.device.answerNewest()
        let kid = setup.device.key.publicKey.fingerprint
        #expect(try setup.api.authorized("DELETE", "/v1/devices/\(kid)", token: setup.device.token).status == 204)
        let answer = try browser.post("/authorize/continue", form: continueForm)
        let (base, parameters) = try OpenIDTestAPI.redirect(answer)
        #expect(base == setup.client.redirectURI)
        #expect(parameters["error"] == "access_denied" && parameters["state"] == "s-revoked")
        #expect(parameters["code"] == nil)
    }

    @Test("/userinfo refuses a form token beside an Authorization header it cannot read")
    func userInfoHeaderAndForm() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let (_, _, _, tokens) = try setup.redeemedCode()
        let token = try #require(tokens.json?["access_token"]?.stringValue)
        for header in ["Basic Zm9vOmJhcg==", "Bearer", "Negotiate abc"] {
            let answer = try setup.api.send(
                "POST", "/userinfo",
                headers: ["Authorization": header, "Content-Type": "application/x-www-form-urlencoded"],
                body: Array("access_token=\(token)".utf8))
            #expect(answer.status == 400 && answer.errorCode == "invalid_request", "\(header): \(answer.status)")
        }
        let formOnly = try setup.api.send(
            "POST", "/userinfo", headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: Array("access_token=\(token)".utf8))
        #expect(formOnly.status == 200)
    }
}
