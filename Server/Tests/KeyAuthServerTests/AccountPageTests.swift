import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The account page through the responder, with the https issuer of direct tests: cookies,
/// CSRF, the cross-site refusal and the session's life, which the browser test cannot see.
@Suite("The account page: sessions, cookies, CSRF and cross-site refusal")
struct AccountPageTests {
    /// A browser: the cookies it holds, sending what a same-origin form sends.
    private struct Browser {
        let api: TestAPI
        var cookies: [String: String] = [:]

        mutating func send(
            _ method: String, _ path: String, form: [(String, String)] = [], headers extra: HTTPHeaders = HTTPHeaders()
        ) throws -> HTTPResponse {
            var headers = extra
            if !cookies.isEmpty {
                headers.add("Cookie", cookies.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: "; "))
            }
            var body: [UInt8] = []
            if method == "POST" {
                headers.set("Content-Type", "application/x-www-form-urlencoded")
                if headers["Origin"] == nil { headers.set("Origin", TestEnvironment.issuer) }
                if headers["Sec-Fetch-Site"] == nil { headers.set("Sec-Fetch-Site", "same-origin") }
                body = Array(
                    form.map { "\(TestAPI.formEncode($0.0))=\(TestAPI.formEncode($0.1))" }.joined(separator: "&").utf8)
            }
            let response = try api.send(method, path, headers: headers, body: body)
            response.keepCookies(in: &cookies)
            return response
        }
    }

    /// The CSRF token of the first form on a page.
    private static func csrf(_ page: String) throws -> String {
        let marker = "name=\"csrf\" value=\""
        let start = try #require(page.range(of: marker)).upperBound
        let end = try #require(page[start...].firstIndex(of: "\""))
        return String(page[start..<end])
    }

    /// Signs alice in through the page, approving with her laptop; returns the browser and the
    /// cookie of the waiting session (dead after the sign-in).
    private static func signIn(_ api: TestAPI, laptop: RSAPrivateKey, token: String) throws -> (Browser, String) {
        var browser = Browser(api: api)
        let form = try browser.send("GET", "/account")
        #expect(form.status == 200)
        let started = try browser.send(
            "POST", "/account/sign-in", form: [("user", "alice"), ("csrf", try csrf(form.text))])
        #expect(started.status == 303)
        let waitingCookie = try #require(browser.cookies["__Host-keyauth-session"])
        let waiting = try browser.send("GET", "/account")
        let list = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        let request = try #require(list.first { $0["kind"] != .string("recovery") })
        #expect(request["client_name"] == .string("keyauth account page (\(TestEnvironment.issuer)/account)"))
        // The code is on the page that asks, never in the device's list.
        #expect(request["binding_message"] == nil)
        let code = try api.code(of: try #require(request["id"]?.stringValue))
        #expect(waiting.text.contains("<p id=\"binding-code\">\(code)</p>"))
        #expect(try browser.send("GET", "/account/sign-in/status").json?["status"] == .string("pending"))
        let id = try #require(request["id"]?.stringValue)
        #expect(
            try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
                .status == 200)
        #expect(try browser.send("GET", "/account/sign-in/status").json?["status"] == .string("approved"))
        let done = try browser.send("POST", "/account/sign-in/continue", form: [("csrf", try csrf(waiting.text))])
        #expect(done.status == 303)
        return (browser, waitingCookie)
    }

    @Test(
        "signing in replaces the waiting session by a new one; cookies are __Host-, Secure, HttpOnly, SameSite=Lax")
    func signInAndCookies() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let first = try api.send("GET", "/account")
        #expect(first.headers["Content-Security-Policy"] == BrowserRequests.contentSecurityPolicy)
        #expect(first.headers["X-Frame-Options"] == "DENY")
        #expect(!first.text.contains("<script>"))
        // Its errors too: an unknown path, a method it does not take.
        for (method, path) in [("GET", "/account/nope"), ("PUT", "/account")] {
            let refused = try api.send(method, path)
            #expect(refused.status >= 400, "\(method) \(path)")
            #expect(refused.headers["Content-Security-Policy"] == BrowserRequests.contentSecurityPolicy, "\(path)")
            #expect(refused.headers["X-Frame-Options"] == "DENY" && refused.headers["Cache-Control"] == "no-store")
        }
        #expect(try api.send("GET", "/v1/nope").headers["X-Frame-Options"] == nil, "an API error is not a page's")
        // And the transport's own 503, for a write that failed after the route answered.
        // Through the protocol, as the transport calls it: the responder's own, not the default.
        let responder: any HTTPResponder = try environment.makeResponder().0
        let failed = responder.failure(StorageError(.unavailable, "disk full"), at: "/account/devices/k/revoke")
        #expect(failed.status == 503 && failed.headers["X-Frame-Options"] == "DENY")
        #expect(failed.headers["Content-Security-Policy"] == BrowserRequests.contentSecurityPolicy)
        #expect(
            responder.failure(StorageError(.unavailable, "disk full"), at: "/oauth/token").headers["X-Frame-Options"]
                == nil)
        let csrfCookie = try #require(first.headers.values(for: "Set-Cookie").first)
        #expect(csrfCookie.hasPrefix("__Host-keyauth-csrf="))
        #expect(csrfCookie.hasSuffix("; Path=/; HttpOnly; SameSite=Lax; Secure"))

        let (browser, waitingCookie) = try Self.signIn(api, laptop: laptop, token: token)
        let session = try #require(browser.cookies["__Host-keyauth-session"])
        #expect(session != waitingCookie)
        var current = browser
        let page = try current.send("GET", "/account")
        #expect(page.text.contains("data-kid=\"\(laptop.publicKey.fingerprint)\""))
        #expect(page.text.contains(">Sign out</button>"))
        // The waiting session's id opens nothing after the sign-in.
        var stale = Browser(api: api, cookies: ["__Host-keyauth-session": waitingCookie])
        #expect(try stale.send("GET", "/account").text.contains("name=\"user\""))
    }

    @Test("a wrong CSRF token, another Origin, Origin null or a cross-site fetch is refused and changes nothing")
    func crossSiteAndCSRF() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        var (browser, _) = try Self.signIn(api, laptop: laptop, token: token)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        let refusals: [([(String, String)], HTTPHeaders)] = [
            ([("csrf", "wrong")], HTTPHeaders()),
            ([], HTTPHeaders()),
            ([("csrf", csrf)], ["Origin": "https://evil.example"]),
            ([("csrf", csrf)], ["Origin": "null"]),
            ([("csrf", csrf)], ["Sec-Fetch-Site": "cross-site"]),
        ]
        for (form, headers) in refusals {
            let response = try browser.send("POST", "/account/sign-out", form: form, headers: headers)
            #expect(response.status == 403, "\(form) \(headers)")
        }
        let kid = laptop.publicKey.fingerprint
        #expect(
            try browser.send("POST", "/account/devices/\(kid)/revoke", form: [], headers: ["Origin": "null"]).status
                == 403)
        #expect(try api.storage.device(kid: kid)?.status == .active)
        #expect(try browser.send("GET", "/account").text.contains(">Sign out</button>"))
        #expect(try browser.send("POST", "/account/sign-out", form: [("csrf", csrf)]).status == 303)
        #expect(try browser.send("GET", "/account").text.contains("name=\"user\""))
    }

    @Test("a second tab's continue, while the first has collected the sign-in, leaves the first its session")
    func twoTabsContinue() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        var browser = Browser(api: api)
        let form = try browser.send("GET", "/account")
        _ = try browser.send("POST", "/account/sign-in", form: [("user", "alice"), ("csrf", try Self.csrf(form.text))])
        let waitingCookie = try #require(browser.cookies["__Host-keyauth-session"])
        let waiting = try browser.send("GET", "/account")
        let list = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        let id = try #require(list.first?["id"]?.stringValue)
        #expect(
            try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
                .status == 200)
        // The first tab collected the request and is about to store its signed-in session.
        #expect(
            try api.storage.markSignInRequestIssued(
                id: id, expiringAfter: SignInRequests.collectionCutoff(at: environment.clock.now)))
        let second = try browser.send(
            "POST", "/account/sign-in/continue", form: [("csrf", try Self.csrf(waiting.text))])
        #expect(second.status == 303)
        // The waiting session is still there for the first tab to replace.
        #expect(try api.storage.browserSession(idHash: try BrowserSessions.hash(waitingCookie)) != nil)
    }

    @Test("revoking the device that approved the session ends it; names are escaped")
    func revokingTheApproverEndsTheSession() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let hostile = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: hostile, name: "<script>alert(1)</script>").status == 202)
        var (browser, _) = try Self.signIn(api, laptop: laptop, token: token)
        let page = try browser.send("GET", "/account").text
        #expect(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(!page.contains("<script>alert"))
        let kid = laptop.publicKey.fingerprint
        #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: token).status == 204)
        #expect(try browser.send("GET", "/account").text.contains("name=\"user\""))
    }

    @Test(
        "a device approval's code is shown only on the session that asked: another session of the user, a stolen cookie's, cannot put it before the user"
    )
    func approvalCodeStaysWithItsSession() throws {
        // Alice's own session, and another, which a thief holds and uses for a key of its own.
        let environment = TestEnvironment()
        var (api, laptop, token, own) = try Self.aliceAtTheAccountPage(environment)
        var thief = try Self.signIn(api, laptop: laptop, token: token).0
        let stolenKey = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: stolenKey, name: "phone").status == 202)
        let kid = stolenKey.publicKey.fingerprint
        let thiefCSRF = try Self.csrf(try thief.send("GET", "/account").text)
        #expect(
            try thief.send("POST", "/account/devices/\(kid)/approve", form: [("csrf", thiefCSRF)]).status == 303)
        let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue?.first)
        let id = try #require(listed["id"]?.stringValue)
        let code = try api.code(of: id)
        #expect(try thief.send("GET", "/account").text.contains("data-approval-code>\(code)</strong>"))
        // Alice's page lists the device, without the code the device asks her to type.
        let ownPage = try own.send("GET", "/account").text
        #expect(ownPage.contains("data-kid=\"\(kid)\""), "\(ownPage)")
        #expect(!ownPage.contains("data-approval-code"), "\(ownPage)")
        #expect(try api.storage.signInRequest(id: id)?.requestedBy != nil)
    }

    /// An API whose sign-in requests last longer than a session's idle lifetime, so that a
    /// request can outlast its session; alice's laptop active, and a page signed in with it.
    private static func signedInWithLongRequests(
        _ environment: TestEnvironment
    ) throws -> (TestAPI, RSAPrivateKey, String, Browser) {
        let api = try environment.directAPI {
            $0.failureLimit = 1000
            $0.signInLifetime = 2 * BrowserSessions.idleLifetime
        }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        return (api, laptop, token, try signIn(api, laptop: laptop, token: token).0)
    }

    /// How the session that pressed Approve ends, in ``approvalEndsWithItsSession(_:)``.
    enum SessionEnding: String, CaseIterable, CustomTestStringConvertible {
        case signedOut = "signed out"
        case approverRevoked = "ended by revoking the device that signed it in"
        case idledOut = "left idle past its lifetime"
        var testDescription: String { rawValue }
    }

    @Test(
        "a device approval ends with the session that asked for it, which a thief may hold",
        arguments: SessionEnding.allCases)
    func approvalEndsWithItsSession(_ ending: SessionEnding) throws {
        let environment = TestEnvironment()
        let (api, laptop, token, signedIn) = try Self.signedInWithLongRequests(environment)
        var browser = signedIn
        let desk = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: desk, name: "desk").status == 202)
        #expect(try api.approveDevice(desk.publicKey.fingerprint, approver: laptop, token: token).status == 200)
        // The session presses Approve on a key of its own and shows the code to type.
        let stranger = try ServerTestKeys.key("alice-3")
        let kid = stranger.publicKey.fingerprint
        #expect(try api.register(user: "alice", key: stranger, name: "phone").status == 202)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        #expect(try browser.send("POST", "/account/devices/\(kid)/approve", form: [("csrf", csrf)]).status == 303)
        let open = try api.storage.openSignInRequests(user: "alice", now: environment.clock.now)
        let id = try #require(open.first { $0.kind == .device && $0.subject == kid }).id
        #expect(try api.authorized("GET", "/v1/auth-requests", token: try api.accessToken(desk)).text.contains(id))

        switch ending {
        case .signedOut:
            #expect(try browser.send("POST", "/account/sign-out", form: [("csrf", csrf)]).status == 303)
        case .approverRevoked:
            let revoked = try api.authorized(
                "DELETE", "/v1/devices/\(laptop.publicKey.fingerprint)", token: try api.accessToken(desk))
            #expect(revoked.status == 204)
        case .idledOut:
            environment.clock.advance(by: BrowserSessions.idleLifetime + 1)
        }
        // Taken now: an access token lives as long as a session's idle time.
        let deskToken = try api.accessToken(desk)
        // Ended sessions withdraw their requests. One left idle is not told: its request stays
        // open in storage (until it expires, or the page's next request withdraws it), but the
        // devices' list leaves it out, as nothing can approve it.
        let listed = try api.storage.openSignInRequests(user: "alice", now: environment.clock.now)
        #expect(listed.contains { $0.id == id } == (ending == .idledOut))
        let devicesList = try api.authorized("GET", "/v1/auth-requests", token: deskToken)
        #expect(devicesList.status == 200)
        #expect(!devicesList.text.contains(id), "\(devicesList.text)")
        // The user, told the code, types it into another device: it approves nothing now.
        let late = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(desk, id: id), token: deskToken)
        #expect(late.errorCode == "expired_token", "\(late.text)")
        let checked = try api.checkCode(id, code: try api.code(of: id), token: deskToken)
        #expect(checked.errorCode == "expired_token", "\(checked.text)")
        #expect(try api.storage.device(kid: kid)?.status == .pending)
        if ending == .idledOut {
            #expect(late.errorDescription?.contains("signed out or ended") == true, "\(late.text)")
            // Denying it, which changes nothing, closes it in storage.
            #expect(try api.answer(id, decision: "deny", assertion: nil, token: deskToken).status == 200)
            #expect(try api.storage.signInRequest(id: id)?.status == .denied)
        } else {
            #expect(try api.storage.signInRequest(id: id)?.status == .pending)
        }
    }

    @Test("a device request ends when its device is approved another way, and answers expired_token once it expired")
    func deviceRequestAfterOtherApproval() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI {
            $0.failureLimit = 1000
            $0.pendingLifetime = 100
        }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        var (browser, _) = try Self.signIn(api, laptop: laptop, token: token)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        var ids: [String: String] = [:]
        for (name, key) in [("phone", "alice-2"), ("desk", "alice-3")] {
            let device = try ServerTestKeys.key(key)
            #expect(try api.register(user: "alice", key: device, name: name).status == 202)
            let kid = device.publicKey.fingerprint
            #expect(try browser.send("POST", "/account/devices/\(kid)/approve", form: [("csrf", csrf)]).status == 303)
            let open = try api.storage.openSignInRequests(user: "alice", now: environment.clock.now)
            ids[name] = try #require(open.first { $0.kind == .device && $0.subject == kid }).id
        }
        // The phone is approved through the device API while its request waits: that ends the
        // request, whose answer then changes nothing.
        let phone = try ServerTestKeys.key("alice-2").publicKey.fingerprint
        #expect(try api.approveDevice(phone, approver: laptop, token: token).status == 200)
        let phoneID = try #require(ids["phone"])
        let ended = try api.answer(
            phoneID, decision: "approve", assertion: try api.approvalAssertion(laptop, id: phoneID), token: token)
        #expect(ended.errorCode == "expired_token", "\(ended.text)")
        #expect(try api.storage.device(kid: phone)?.status == .active)
        // The desk's registration expires before its request is answered.
        let deskID = try #require(ids["desk"])
        let desk = try ServerTestKeys.key("alice-3").publicKey.fingerprint
        #expect(try api.storage.device(kid: desk)?.status == .pending)
        environment.clock.advance(by: 101)
        let late = try api.answer(
            deskID, decision: "approve", assertion: try api.approvalAssertion(laptop, id: deskID),
            token: try api.accessToken(laptop))
        #expect(late.errorCode == "expired_token", "\(late.text)")
    }

    @Test("a device approval whose session idled out does not hold the user's one open request")
    func idledOutApprovalGivesWay() throws {
        let environment = TestEnvironment()
        let (api, laptop, token, signedIn) = try Self.signedInWithLongRequests(environment)
        var browser = signedIn
        let stranger = try ServerTestKeys.key("alice-3")
        let kid = stranger.publicKey.fingerprint
        #expect(try api.register(user: "alice", key: stranger, name: "phone").status == 202)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        #expect(try browser.send("POST", "/account/devices/\(kid)/approve", form: [("csrf", csrf)]).status == 303)
        let first = try #require(
            try api.storage.openSignInRequests(user: "alice", now: environment.clock.now).first { $0.kind == .device })
        environment.clock.advance(by: BrowserSessions.idleLifetime + 1)
        // Signed in again from another address (the same one's request would replace it anyway).
        var elsewhere = api
        elsewhere.clientAddress = "192.0.2.77"
        let laterToken = try api.accessToken(laptop)
        var again = try Self.signIn(elsewhere, laptop: laptop, token: laterToken).0
        // A key registered since: the first one's registration has expired meanwhile.
        let desk = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: desk, name: "desk").status == 202)
        let deskKID = desk.publicKey.fingerprint
        let csrfAgain = try Self.csrf(try again.send("GET", "/account").text)
        let asked = try again.send("POST", "/account/devices/\(deskKID)/approve", form: [("csrf", csrfAgain)])
        #expect(asked.status == 303, "\(asked.text)")
        let open = try api.storage.openSignInRequests(user: "alice", now: environment.clock.now)
        #expect(open.contains { $0.kind == .device && $0.subject == deskKID }, "\(open)")
        #expect(
            try api.storage.signInRequest(id: first.id)?.expiresAt == environment.clock.now - ClockSkewCheck.purgeMargin
        )
    }

    @Test("renaming refuses a confusable name with the rule's reason and stores a good one in NFC")
    func rename() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        var (browser, _) = try Self.signIn(api, laptop: laptop, token: token)
        let kid = laptop.publicKey.fingerprint
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        let refused = try browser.send(
            "POST", "/account/devices/\(kid)/rename", form: [("name", "alice-l\u{430}ptop"), ("csrf", csrf)])
        #expect(refused.status == 400)
        #expect(refused.text.contains("mixes the Latin and Cyrillic scripts"))
        #expect(try api.storage.device(kid: kid)?.name == "test-device")
        let renamed = try browser.send(
            "POST", "/account/devices/\(kid)/rename", form: [("name", "Cafe\u{301}"), ("csrf", csrf)])
        #expect(renamed.status == 303)
        #expect(try api.storage.device(kid: kid).map { Array($0.name.unicodeScalars) } == ["C", "a", "f", "\u{E9}"])
        // A pending device keeps its name: the approving device shows it beside the code's
        // prompt, and a session that pressed Approve could rename it to read as the code.
        let phone = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: phone, name: "phone").status == 202)
        let pendingKID = phone.publicKey.fingerprint
        let pending = try browser.send(
            "POST", "/account/devices/\(pendingKID)/rename", form: [("name", "phone (code 57)"), ("csrf", csrf)])
        #expect(pending.status == 400)
        #expect(pending.text.contains("waiting for approval keeps the name"), "\(pending.text)")
        #expect(try api.storage.device(kid: pendingKID)?.name == "phone")
    }

    @Test(
        "Approve on the page asks a device: the page shows the code, the device lists what it approves without it, and only its assertion with the code activates the device"
    )
    func approvalIsAPush() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let phone = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: phone, name: "new phone").status == 202)
        let kid = phone.publicKey.fingerprint
        var (browser, _) = try Self.signIn(api, laptop: laptop, token: token)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)

        // The session alone approves nothing: the click asks the user's devices.
        #expect(try browser.send("POST", "/account/devices/\(kid)/approve", form: [("csrf", csrf)]).status == 303)
        #expect(try api.storage.device(kid: kid)?.status == .pending)
        let page = try browser.send("GET", "/account").text
        let listed = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue?.first)
        #expect(listed["kind"] == .string("device"))
        let name = try #require(listed["client_name"]?.stringValue)
        #expect(name.contains("approve the new device \"new phone\" (\(kid.prefix(8)))"), "\(name)")
        let id = try #require(listed["id"]?.stringValue)
        let code = try api.code(of: id)
        #expect(page.contains("data-approval-code>\(code)</strong>"), "\(page)")
        #expect(listed["binding_message"] == nil)

        // A key-only statement cannot approve a device: the approving device must check its user.
        let keyOnly = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id, methods: ["swk"]),
            token: token)
        #expect(keyOnly.errorCode == "invalid_grant" && keyOnly.errorDescription?.contains("presence") == true)
        // A wrong code is counted and approves nothing.
        let wrong = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id, code: "no"), token: token)
        #expect(wrong.errorCode == "wrong_code" && wrong.json?["attempts_left"] == .integer(2))
        #expect(try api.storage.device(kid: kid)?.status == .pending)
        let approved = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        #expect(approved.status == 200, "\(approved.text)")
        #expect(try api.storage.device(kid: kid)?.status == .active)
        #expect(try api.storage.signInRequest(id: id)?.status == .issued)
        let events = try AuditTrail(storage: api.storage, now: environment.clock.closure).events(since: 0)
        #expect(
            events.contains {
                $0.action == .approve && $0.subject == kid && $0.actor == "device:\(laptop.publicKey.fingerprint)"
                    && $0.detail?.contains("account page") == true
            })
        #expect(events.contains { $0.action == .approveSignIn && $0.subject == "device:\(kid)" })
        #expect(events.contains { $0.action == .browserSignIn && $0.subject == "account-page" })
        #expect(!(try browser.send("GET", "/account").text.contains("data-approval-code")))
    }

    @Test("a waiting session kept past its request's expiry signs nobody in, and looks the same for an unknown name")
    func waitingSessionPastTheExpiry() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let kid = laptop.publicKey.fingerprint
        let token = try api.activeDevice(user: "alice", key: laptop)
        // Alice, with a device and so a request; nobody, a name without one.
        var browsers: [Browser] = []
        var tokens: [String] = []
        for user in ["alice", "nobody"] {
            var browser = Browser(api: api)
            let form = try browser.send("GET", "/account")
            _ = try browser.send(
                "POST", "/account/sign-in", form: [("user", user), ("csrf", try Self.csrf(form.text))])
            tokens.append(try Self.csrf(try browser.send("GET", "/account").text))
            browsers.append(browser)
        }
        let requests = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        let id = try #require(requests.first?["id"]?.stringValue)
        let expiry = try #require(try api.storage.signInRequest(id: id)).expiresAt
        for index in browsers.indices {
            let status = try browsers[index].send("GET", "/account/sign-in/status")
            #expect(status.json?["status"] == .string("pending"), "\(index)")
        }
        environment.clock.advance(by: expiry - environment.clock.now)
        // Too late to approve: the grace is the browser's, to collect an answer given in time.
        let late = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        #expect(late.errorCode == "expired_token")

        for index in browsers.indices {
            let page = try browsers[index].send("GET", "/account")
            #expect(page.text.contains("id=\"binding-code\"") && !page.text.contains(">Sign out</button>"), "\(index)")
            let status = try browsers[index].send("GET", "/account/sign-in/status")
            #expect(status.json?["status"] == .string("expired"), "\(index)")
            let revoke = try browsers[index].send(
                "POST", "/account/devices/\(kid)/revoke", form: [("csrf", tokens[index])])
            #expect(revoke.status == 403, "\(index)")
        }
        #expect(try api.storage.device(kid: kid)?.status == .active)
        environment.clock.advance(by: SignInRequests.answerGrace)
        for index in browsers.indices {
            #expect(try browsers[index].send("GET", "/account").text.contains("name=\"user\""), "\(index)")
        }
    }

    @Test(
        "a second start from the same address tells the first browser nothing of the name: it waits, as for an unknown one"
    )
    func replacedRequestLooksLikeNone() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        var firsts: [Browser] = []
        for user in ["alice", "nobody"] {
            // Two browsers at one address, the second without the first's cookies.
            var browsers = [Browser(api: api), Browser(api: api)]
            for index in browsers.indices {
                let form = try browsers[index].send("GET", "/account")
                let started = try browsers[index].send(
                    "POST", "/account/sign-in", form: [("user", user), ("csrf", try Self.csrf(form.text))])
                #expect(started.status == 303)
            }
            firsts.append(browsers[0])
        }
        let open = try #require(try api.openRequests(token: token).json?["requests"]?.arrayValue)
        #expect(open.count == 1, "the second start replaced alice's first request")
        for index in firsts.indices {
            let status = try firsts[index].send("GET", "/account/sign-in/status")
            #expect(status.json?["status"] == .string("pending"), "\(index)")
        }
        environment.clock.advance(by: SignInRequests.Settings().maximumLifetime)
        for index in firsts.indices {
            let status = try firsts[index].send("GET", "/account/sign-in/status")
            #expect(status.json?["status"] == .string("expired"), "\(index)")
        }
    }

    /// Alice signed in at the account page by her laptop's approval: the API, the browser, the
    /// stored hash of its session cookie, and the laptop's key id and access token.
    private static func signedInByLaptop(_ environment: TestEnvironment) throws -> (
        api: TestAPI, browser: Browser, idHash: [UInt8], kid: String, token: String
    ) {
        let api = try environment.directAPI { $0.failureLimit = 1000 }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let (browser, _) = try signIn(api, laptop: laptop, token: token)
        let idHash = try BrowserSessions.hash(try #require(browser.cookies["__Host-keyauth-session"]))
        #expect(try api.storage.browserSession(idHash: idHash) != nil)
        return (api, browser, idHash, laptop.publicKey.fingerprint, token)
    }

    @Test("revoking a device through the device API deletes the browser sessions it approved at once")
    func apiRevocationEndsSessions() throws {
        let environment = TestEnvironment()
        defer { withExtendedLifetime(environment) {} }
        var (api, browser, idHash, kid, token) = try Self.signedInByLaptop(environment)
        #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: token).status == 204)
        // Deleted by the revocation itself, before the cookie comes back.
        #expect(try api.storage.browserSession(idHash: idHash) == nil)
        #expect(try browser.send("GET", "/account").text.contains("name=\"user\""))
    }

    @Test(
        "revoking a device with keyauth-server revoke deletes the browser sessions it approved",
        .timeLimit(.minutes(5)))
    func adminRevocationEndsSessions() throws {
        let environment = TestEnvironment()
        defer { withExtendedLifetime(environment) {} }
        var (api, browser, idHash, kid, _) = try Self.signedInByLaptop(environment)
        // The command refuses a database others can read (it holds the signing key); the test's
        // storage made it with the default mode.
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: environment.databasePath)
        let revoked = try KeyAuthServerProcess.runCommand(
            ["revoke", kid, "--db", environment.databasePath, "--config", "/dev/null"])
        #expect(revoked.status == 0, "\(revoked.error)")
        #expect(try api.storage.browserSession(idHash: idHash) == nil)
        #expect(try browser.send("GET", "/account").text.contains("name=\"user\""))
    }

    @Test(
        "the page shows how many recovery codes are left; a new set needs a device's approval and is shown once"
    )
    func recoveryCodes() throws {
        let environment = TestEnvironment()
        let api = try Self.recoveryCodesAPI(environment)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        var (browser, _) = try Self.signIn(api, laptop: laptop, token: token)
        let before = try browser.send("GET", "/account").text
        #expect(before.contains("data-recovery-codes-left=\"0\""))
        let csrf = try Self.csrf(before)

        // The session alone makes nothing: the click asks the user's devices.
        #expect(try browser.send("POST", "/account/recovery-codes", form: [("csrf", csrf)]).status == 303)
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").isEmpty)
        let waiting = try browser.send("GET", "/account").text
        let listed = try #require(
            try api.openRequests(token: token).json?["requests"]?.arrayValue?.first {
                $0["kind"] == .string("recovery-codes")
            })
        #expect(listed["client_name"]?.stringValue?.contains("make new recovery codes") == true)
        let id = try #require(listed["id"]?.stringValue)
        #expect(waiting.contains("data-approval-code>\(try api.code(of: id))</strong>"), "\(waiting)")
        #expect(waiting.contains("name=\"request\" value=\"\(id)\""))
        let early = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(early.status == 400 && early.text.contains("Not approved yet"))

        let keyOnly = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id, methods: ["swk"]),
            token: token)
        #expect(keyOnly.errorCode == "invalid_grant")
        #expect(
            try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
                .status == 200)
        let shown = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(shown.status == 200)
        #expect(shown.headers["Cache-Control"] == "no-store")
        let codes = shown.text.split(separator: "<li><code>").dropFirst().map { String($0.prefix(24)) }
        #expect(codes.count == 10 && codes.allSatisfy { EnrollmentCodes.canonical($0) == $0 }, "\(shown.text)")
        let stored = try api.storage.unusedRecoveryCodes(user: "alice")
        #expect(stored.count == 10)
        let events = try AuditTrail(storage: api.storage, now: environment.clock.closure).events(since: 0)
        #expect(
            events.contains {
                $0.action == .recoveryCodes && $0.actor == "account-page:\(laptop.publicKey.fingerprint)"
            })

        // Once only: a second post shows nothing and changes nothing.
        let twice = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(twice.status == 400 && !twice.text.contains("<li><code>"))
        #expect(try api.storage.unusedRecoveryCodes(user: "alice") == stored)
        let after = try browser.send("GET", "/account").text
        #expect(after.contains("data-recovery-codes-left=\"10\"") && !after.contains("<li><code>"))
        // Another session's request, or a made-up id, shows nothing either.
        let forged = try browser.send(
            "POST", "/account/recovery-codes/show",
            form: [("csrf", csrf), ("request", String(repeating: "A", count: 43))])
        #expect(forged.status == 400 && !forged.text.contains("<li><code>"))
    }
}

extension AccountPageTests {
    /// A server with cheap recovery-code hashing and room for the failures a test makes.
    @Test("a session that a device enrolled by recovery code approved revokes, denies and renames no other device")
    func announcedApproverActsOnNoOtherDevice() throws {
        let environment = TestEnvironment()
        let api = try Self.recoveryCodesAPI(environment)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let codes = try RecoveryCodeTests.codes(try RecoveryCodeTests.makeCodes(api, key: laptop, token: token))
        let thief = try ServerTestKeys.key("alice-2")
        #expect(try RecoveryCodeTests.recover(api, key: thief, code: codes[0]).status == 201)
        var (browser, _) = try Self.signIn(api, laptop: thief, token: try api.accessToken(thief))
        let kid = laptop.publicKey.fingerprint
        for action in ["revoke", "rename"] {
            let csrf = try Self.csrf(try browser.send("GET", "/account").text)
            let refused = try browser.send(
                "POST", "/account/devices/\(kid)/\(action)", form: [("name", "gone"), ("csrf", csrf)])
            #expect(refused.status == 400, "\(action)")
            #expect(refused.text.contains("enrolled with a recovery code"), "\(action): \(refused.text)")
        }
        let laptopNow = try api.storage.device(kid: kid)
        #expect(laptopNow?.status == .active && laptopNow?.name == "test-device")
    }

    static func recoveryCodesAPI(_ environment: TestEnvironment) throws -> TestAPI {
        try environment.directAPI {
            $0.failureLimit = 1000
            $0.recoveryCodeIterations = 1000
        }
    }

    /// Alice's laptop, active, and a browser session it approved, on a server with cheap
    /// recovery-code hashing.
    private static func aliceAtTheAccountPage(_ environment: TestEnvironment) throws -> (
        api: TestAPI, laptop: RSAPrivateKey, token: String, browser: Browser
    ) {
        let api = try recoveryCodesAPI(environment)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let (browser, _) = try signIn(api, laptop: laptop, token: token)
        return (api, laptop, token, browser)
    }

    /// Presses `Make new recovery codes` in `browser`; returns the id of the request that the
    /// user's devices list.
    private static func askForRecoveryCodes(
        _ api: TestAPI, in browser: inout Browser, csrf: String, token: String
    ) throws -> String {
        #expect(try browser.send("POST", "/account/recovery-codes", form: [("csrf", csrf)]).status == 303)
        let listed = try #require(
            try api.openRequests(token: token).json?["requests"]?.arrayValue?.first {
                $0["kind"] == .string("recovery-codes")
            })
        return try #require(listed["id"]?.stringValue)
    }

    @Test("new recovery codes go only to the session that asked: another session of the user sees and takes nothing")
    func recoveryCodesStayWithTheirSession() throws {
        let environment = TestEnvironment()
        var (api, laptop, token, owner) = try Self.aliceAtTheAccountPage(environment)
        // A second session of alice's, a stolen cookie's for instance.
        var other = try Self.signIn(api, laptop: laptop, token: token).0
        let ownerCSRF = try Self.csrf(try owner.send("GET", "/account").text)
        let otherCSRF = try Self.csrf(try other.send("GET", "/account").text)
        #expect(ownerCSRF != otherCSRF)

        let id = try Self.askForRecoveryCodes(api, in: &owner, csrf: ownerCSRF, token: token)
        let code = try api.code(of: id)
        #expect(try owner.send("GET", "/account").text.contains("name=\"request\" value=\"\(id)\""))
        let otherPage = try other.send("GET", "/account").text
        #expect(!otherPage.contains(id) && !otherPage.contains("data-approval-code>\(code)<"))
        #expect(
            try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
                .status == 200)

        let taken = try other.send(
            "POST", "/account/recovery-codes/show", form: [("csrf", otherCSRF), ("request", id)])
        #expect(taken.status == 400 && !taken.text.contains("<li><code>"))
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").isEmpty)
        #expect(try api.storage.signInRequest(id: id)?.status == .approved)
        let shown = try owner.send(
            "POST", "/account/recovery-codes/show", form: [("csrf", ownerCSRF), ("request", id)])
        #expect(shown.status == 200 && shown.text.components(separatedBy: "<li><code>").count == 11)
    }

    @Test("a recovery-codes request past its expiry: an approval given in time is collected for a while, none later")
    func expiredRecoveryCodesApproval() throws {
        let environment = TestEnvironment()
        var (api, laptop, token, browser) = try Self.aliceAtTheAccountPage(environment)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        let show = { (browser: inout Browser, id: String) throws -> HTTPResponse in
            try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        }
        let approve = { (id: String) throws -> HTTPResponse in
            try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        }

        // Unanswered at its expiry: expired, and too late to approve.
        let unanswered = try Self.askForRecoveryCodes(api, in: &browser, csrf: csrf, token: token)
        var record = try #require(try api.storage.signInRequest(id: unanswered))
        environment.clock.advance(by: record.expiresAt - environment.clock.now)
        let expired = try show(&browser, unanswered)
        #expect(expired.status == 400 && expired.text.contains("request expired"))
        #expect(!expired.text.contains("<li><code>"))
        #expect(try approve(unanswered).errorCode == "expired_token")
        let late = try show(&browser, unanswered)
        #expect(late.status == 400 && late.text.contains("request expired") && !late.text.contains("<li><code>"))
        #expect(try api.storage.signInRequest(id: unanswered)?.status == .pending)
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").isEmpty)

        // Approved in time, collected after the expiry, within the grace.
        let inTime = try Self.askForRecoveryCodes(api, in: &browser, csrf: csrf, token: token)
        #expect(try approve(inTime).status == 200)
        record = try #require(try api.storage.signInRequest(id: inTime))
        environment.clock.advance(by: record.expiresAt + SignInRequests.answerGrace - 1 - environment.clock.now)
        let shown = try show(&browser, inTime)
        #expect(shown.status == 200 && shown.text.components(separatedBy: "<li><code>").count == 11)
        let stored = try api.storage.unusedRecoveryCodes(user: "alice")
        #expect(stored.count == 10)

        // Approved in time, left uncollected past the grace: it makes nothing.
        let stale = try Self.askForRecoveryCodes(api, in: &browser, csrf: csrf, token: token)
        #expect(try approve(stale).status == 200)
        record = try #require(try api.storage.signInRequest(id: stale))
        environment.clock.advance(by: record.expiresAt + SignInRequests.answerGrace - environment.clock.now)
        let tooLate = try show(&browser, stale)
        #expect(tooLate.status == 400 && tooLate.text.contains("request expired"))
        #expect(!tooLate.text.contains("<li><code>"))
        #expect(try api.storage.unusedRecoveryCodes(user: "alice") == stored)
        #expect(try api.storage.signInRequest(id: stale)?.status == .approved)
    }

    @Test("a page reloaded after the approval keeps Show the new codes until they are shown or the grace ends")
    func approvedRecoveryCodesSurviveAReload() throws {
        let environment = TestEnvironment()
        var (api, laptop, token, browser) = try Self.aliceAtTheAccountPage(environment)
        var other = try Self.signIn(api, laptop: laptop, token: token).0
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        let approve = { (id: String) throws -> HTTPResponse in
            try api.answer(id, decision: "approve", assertion: try api.approvalAssertion(laptop, id: id), token: token)
        }
        let offersShow = { (browser: inout Browser, id: String) throws -> Bool in
            let page = try browser.send("GET", "/account").text
            return page.contains(id) && page.contains("Show the new codes")
        }

        // Approved: the reloaded page offers the form, without the code; no other session does.
        let id = try Self.askForRecoveryCodes(api, in: &browser, csrf: csrf, token: token)
        #expect(try approve(id).status == 200)
        let page = try browser.send("GET", "/account").text
        #expect(try offersShow(&browser, id) && !page.contains("data-approval-code"))
        #expect(try !offersShow(&other, id))
        // Shown: the button that asks for a new set comes back.
        let shown = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(shown.status == 200 && shown.text.components(separatedBy: "<li><code>").count == 11)
        #expect(try !offersShow(&browser, id))
        #expect(try browser.send("GET", "/account").text.contains("Make new recovery codes"))

        // Approved in time and left: offered in the grace's last second, not at its end.
        let stale = try Self.askForRecoveryCodes(api, in: &browser, csrf: csrf, token: token)
        #expect(try approve(stale).status == 200)
        let record = try #require(try api.storage.signInRequest(id: stale))
        environment.clock.advance(by: record.expiresAt + SignInRequests.answerGrace - 1 - environment.clock.now)
        #expect(try offersShow(&browser, stale))
        environment.clock.advance(by: 1)
        #expect(try !offersShow(&browser, stale))
    }
}

extension AccountPageTests {
    /// Alice signed in at the account page of a server with no slot to hash recovery codes in
    /// (every set it would make is refused as busy), and her request for new codes, approved.
    private static func approvedOnBusyServer(_ environment: TestEnvironment) throws -> (
        api: TestAPI, browser: Browser, csrf: String, id: String
    ) {
        let busy = try environment.directAPI {
            $0.failureLimit = 1000
            $0.recoveryCodeIterations = 1000
            $0.slowHashSlots = 0
        }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try busy.activeDevice(user: "alice", key: laptop)
        var (browser, _) = try Self.signIn(busy, laptop: laptop, token: token)
        let csrf = try Self.csrf(try browser.send("GET", "/account").text)
        let id = try Self.askForRecoveryCodes(busy, in: &browser, csrf: csrf, token: token)
        #expect(
            try busy.answer(
                id, decision: "approve", assertion: try busy.approvalAssertion(laptop, id: id), token: token
            )
            .status == 200)
        return (busy, browser, csrf, id)
    }

    @Test("a busy server leaves an approved recovery-codes request to collect, and a free one shows the codes once")
    func busyRecoveryCodes() throws {
        let environment = TestEnvironment()
        var (busy, browser, csrf, id) = try Self.approvedOnBusyServer(environment)
        let refused = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(refused.status == 503 && refused.text.contains("The server is busy"))
        #expect(!refused.text.contains("<li><code>") && refused.text.contains("name=\"request\" value=\"\(id)\""))
        #expect(try busy.storage.unusedRecoveryCodes(user: "alice").isEmpty)
        #expect(try busy.storage.signInRequest(id: id)?.status == .approved)

        // The same database served with a free slot: the approval is collected now, once.
        let free = try environment.directAPI {
            $0.recoveryCodeIterations = 1000
            $0.slowHashSlots = 1
        }
        browser = Browser(api: free, cookies: browser.cookies)
        let shown = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(shown.status == 200 && shown.text.components(separatedBy: "<li><code>").count == 11)
        #expect(try free.storage.unusedRecoveryCodes(user: "alice").count == 10)
    }

    @Test("Show after an approval's collection grace is refused as expired before any code is hashed")
    func expiredApprovalHashesNothing() throws {
        let environment = TestEnvironment()
        // A set made would be refused as busy (503), not as expired.
        var (api, browser, csrf, id) = try Self.approvedOnBusyServer(environment)
        let record = try #require(try api.storage.signInRequest(id: id))
        environment.clock.advance(by: record.expiresAt - environment.clock.now + SignInRequests.answerGrace + 1)
        let late = try browser.send("POST", "/account/recovery-codes/show", form: [("csrf", csrf), ("request", id)])
        #expect(late.status == 400 && late.text.contains("The request expired"), "\(late.status)")
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").isEmpty)
    }
}
