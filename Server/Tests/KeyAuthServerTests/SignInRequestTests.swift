import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

@Suite(
    "Push sign-in (CIBA poll mode): client authentication, requests, answers and the token", .timeLimit(.minutes(10)))
struct SignInRequestTests {
    /// An API with a generous failure budget, alice's active laptop and its token, and a client.
    private struct Setup {
        let environment: TestEnvironment
        let api: TestAPI
        let laptop: RSAPrivateKey
        let token: String
        let client: TestClient

        init(_ configure: (inout ServerConfiguration) -> Void = { $0.failureLimit = 1000 }) throws {
            environment = TestEnvironment()
            api = try environment.directAPI(configure)
            laptop = try ServerTestKeys.key("alice-1")
            token = try api.activeDevice(user: "alice", key: laptop)
            client = try api.addClient()
        }
    }

    @Test("bc-authorize answers auth_req_id, expires_in capped at 300 and interval 5; a code when none is given")
    func acknowledgement() throws {
        let setup = try Setup()
        let response = try setup.api.backchannelAuthorize(setup.client, user: "alice")
        #expect(response.status == 200)
        #expect(response.headers["Cache-Control"] == "no-store")
        let json = try #require(response.json)
        let id = try #require(json["auth_req_id"]?.stringValue)
        #expect(InputRules.isValidSignInRequestID(id))
        #expect(json["expires_in"] == .integer(300))
        #expect(json["interval"] == .integer(5))
        let stored = try #require(try setup.api.storage.signInRequest(id: id))
        // 2 digits, or 3 when the 2 appear in what the device shows (the address 127.0.0.1).
        #expect(Int(stored.bindingMessage).map { (10...999).contains($0) } == true, "\(stored.bindingMessage)")
        #expect(stored.kind == .backchannel && stored.clientID == setup.client.id && stored.user == "alice")
        #expect(stored.requestedFrom == setup.api.clientAddress)

        let long = try setup.api.backchannelAuthorize(setup.client, user: "alice", extra: [("requested_expiry", "900")])
        #expect(long.json?["expires_in"] == .integer(300))
        // Another client: this one holds its share of alice's open requests (2).
        let other = try setup.api.addClient("Wiki")
        let short = try setup.api.backchannelAuthorize(other, user: "alice", extra: [("requested_expiry", "60")])
        #expect(short.json?["expires_in"] == .integer(60))
    }

    @Test("client_secret_basic and client_secret_post authenticate; anything else is 401 invalid_client")
    func clientAuthentication() throws {
        let setup = try Setup()
        let api = setup.api
        let post = try api.clientPost(
            "/bc-authorize", client: nil,
            form: [("login_hint", "alice"), ("client_id", setup.client.id), ("client_secret", setup.client.secret)])
        #expect(post.status == 200)
        let refusals: [(TestClient?, String)] = [
            (nil, "no credentials"),
            (TestClient(id: setup.client.id, secret: setup.client.secret + "x"), "wrong secret"),
            (TestClient(id: "unknown-client", secret: setup.client.secret), "unknown client"),
        ]
        for (client, reason) in refusals {
            let response = try api.backchannelAuthorize(client, user: "alice")
            #expect(response.status == 401, "\(reason)")
            #expect(response.errorCode == "invalid_client", "\(reason)")
            #expect(response.headers["WWW-Authenticate"] == "Basic realm=\"keyauth\"", "\(reason)")
        }
        // Basic with the same client_id in the body is one method (RFC 6749 section 4.1.3 has
        // clients send client_id); a secret in the body too, or another client's id, is two.
        let named = try api.clientPost(
            "/bc-authorize", client: setup.client, form: [("login_hint", "alice"), ("client_id", setup.client.id)])
        #expect(named.status == 200, "\(named.text)")
        let twoMethods: [[(String, String)]] = [
            [("client_secret", setup.client.secret)],
            [("client_id", setup.client.id), ("client_secret", setup.client.secret)],
            [("client_id", "another-client")],
        ]
        for extra in twoMethods {
            let both = try api.clientPost(
                "/bc-authorize", client: setup.client, form: [("login_hint", "alice")] + extra)
            #expect(both.status == 400 && both.errorCode == "invalid_request", "\(extra.map(\.0))")
        }
        // The token endpoint checks the client the same way (on a new request, once the client's
        // two open ones have expired: its share).
        setup.environment.clock.advance(by: 301)
        let id = try api.startSignIn(setup.client, user: "alice")
        #expect(try api.poll(nil, id: id).errorCode == "invalid_client")
        #expect(try api.poll(TestClient(id: setup.client.id, secret: "nope"), id: id).status == 401)
    }

    @Test("client authentication failures count against the address's failure budget, as logins do")
    func clientFailuresAreRateLimited() throws {
        let setup = try Setup { $0.failureLimit = 3 }
        let wrong = TestClient(id: setup.client.id, secret: "guess")
        for _ in 0..<3 {
            #expect(try setup.api.backchannelAuthorize(wrong, user: "alice").status == 401)
        }
        let limited = try setup.api.backchannelAuthorize(setup.client, user: "alice")
        #expect(limited.status == 429)
        #expect(limited.errorCode == "slow_down")
        #expect(limited.headers["Retry-After"] != nil)
        var other = setup.api
        other.clientAddress = "198.51.100.7"
        #expect(try other.backchannelAuthorize(setup.client, user: "alice").status == 200)
    }

    @Test("refusals after the client authenticated (a mistyped name, push fatigue) do not lock the address out")
    func userRefusalsAreNotFailures() throws {
        let setup = try Setup { $0.failureLimit = 3 }
        let api = setup.api
        for _ in 0..<2 { _ = try api.startSignIn(setup.client, user: "alice") }
        for _ in 0..<4 {
            #expect(try api.backchannelAuthorize(setup.client, user: "nobody").errorCode == "unknown_user_id")
            #expect(try api.backchannelAuthorize(setup.client, user: "alice").errorCode == "slow_down")
        }
        // The host's other users, and device logins from the same address, go on.
        let bob = try ServerTestKeys.key("bob-1")
        _ = try api.activeDevice(user: "bob", key: bob)
        #expect(try api.backchannelAuthorize(setup.client, user: "bob").status == 200)
        #expect(try api.login(setup.laptop).status == 200)
    }

    @Test("a code the server makes is 2 uniform digits, or 3 when those appear in the text shown beside its prompt")
    func codeAvoidsTheShownText() throws {
        // Every 2-digit code in the text: each draw becomes a 3-digit code the text lacks.
        let every = (10...99).map(String.init).joined(separator: " ")
        for _ in 0..<20 {
            let code = try SignInRequests.makeBindingCode(avoiding: "phone " + every)
            #expect(code.count == 3 && !every.contains(code), "\(code)")
        }
        // Digits of another script, or under a combining mark, read as the digits they show.
        #expect(SignInRequests.digitSkeleton("phone 5\u{301}7 \u{665}\u{667}") == "      57 57")
        for _ in 0..<300 {
            #expect(try SignInRequests.makeBindingCode(avoiding: "phone \u{665}\u{667}") != "57")
        }
        var seen = Set<String>()
        for _ in 0..<2000 { seen.insert(try SignInRequests.makeBindingCode()) }
        #expect(seen.count == 90, "every 2-digit code is drawn when nothing is shown")
    }

    @Test("bc-authorize refuses as CIBA section 13 says: unknown user, bad binding message, bad expiry, no hint")
    func requestErrors() throws {
        let setup = try Setup()
        let api = setup.api
        let cases: [([(String, String)], Int, String)] = [
            ([("login_hint", "nobody")], 400, "unknown_user_id"),
            ([("login_hint", "not a user!")], 400, "unknown_user_id"),
            ([], 400, "invalid_request"),
            (
                [("login_hint", "alice"), ("binding_message", String(repeating: "7", count: 33))], 400,
                "invalid_binding_message"
            ),
            ([("login_hint", "alice"), ("binding_message", "AB\u{7}12")], 400, "invalid_binding_message"),
            ([("login_hint", "alice"), ("binding_message", " AB")], 400, "invalid_binding_message"),
            // A code typed out of habit, to agree or to refuse, shows nothing was read.
            ([("login_hint", "alice"), ("binding_message", "Deny")], 400, "invalid_binding_message"),
            ([("login_hint", "alice"), ("binding_message", "yes")], 400, "invalid_binding_message"),
            ([("login_hint", "alice"), ("binding_message", "OK")], 400, "invalid_binding_message"),
            ([("login_hint", "alice"), ("binding_message", "approve")], 400, "invalid_binding_message"),
            // With no digit, a word typed to refuse could match it.
            ([("login_hint", "alice"), ("binding_message", "stop")], 400, "invalid_binding_message"),
            ([("login_hint", "alice"), ("binding_message", "not me")], 400, "invalid_binding_message"),
            ([("login_hint", "alice"), ("requested_expiry", "0")], 400, "invalid_request"),
            ([("login_hint", "alice"), ("requested_expiry", "soon")], 400, "invalid_request"),
            ([("login_hint", "alice"), ("id_token_hint", "x")], 400, "invalid_request"),
            // The device shows the scope beside the code prompt: only RFC 6749 scope tokens.
            ([("login_hint", "alice"), ("scope", "openid  your code is 57")], 400, "invalid_scope"),
            // Nor may it spell out the code typed beside it.
            (
                [("login_hint", "alice"), ("binding_message", "57"), ("scope", "openid enter 57 to approve")], 400,
                "invalid_scope"
            ),
            ([("login_hint", "alice"), ("scope", "openid \"57\"")], 400, "invalid_scope"),
            ([("login_hint", "alice"), ("scope", "r\u{E9}sum\u{E9}")], 400, "invalid_scope"),
            ([("login_hint", "alice"), ("scope", "openid\tprofile")], 400, "invalid_scope"),
            ([("login_hint", "alice"), ("scope", String(repeating: "a", count: 257))], 400, "invalid_scope"),
        ]
        for (form, status, code) in cases {
            let response = try api.clientPost("/bc-authorize", client: setup.client, form: form)
            #expect(response.status == status, "\(form)")
            #expect(response.errorCode == code, "\(form)")
        }
        // A user whose only device is revoked has nobody to ask.
        let revokedToken = try api.activeDevice(user: "carol", key: try ServerTestKeys.key("carol-1"))
        let carol = try ServerTestKeys.key("carol-1").publicKey.fingerprint
        #expect(try api.authorized("DELETE", "/v1/devices/\(carol)", token: revokedToken).status == 204)
        #expect(try api.backchannelAuthorize(setup.client, user: "carol").errorCode == "unknown_user_id")
        #expect(try api.storage.openSignInRequests(user: "alice", now: setup.environment.clock.now).isEmpty)
        // 256 bytes of scope tokens, the most a request may carry.
        let longest = Array(repeating: "abcdefg", count: 32).joined(separator: " ") + "h"
        #expect(longest.utf8.count == SignInRequests.maximumScopeLength)
        #expect(try api.backchannelAuthorize(setup.client, user: "alice", extra: [("scope", longest)]).status == 200)
        // Nor may what the device shows beside the prompt spell it out: the client's name.
        let kiosk = try api.addClient("Kiosk 42")
        for message in ["42", "kiosk 42"] {
            let spelled = try api.clientPost(
                "/bc-authorize", client: kiosk, form: [("login_hint", "alice"), ("binding_message", message)])
            #expect(spelled.status == 400 && spelled.errorCode == "invalid_binding_message", "\(message)")
        }
        let apart = try api.clientPost(
            "/bc-authorize", client: kiosk, form: [("login_hint", "alice"), ("binding_message", "57")])
        #expect(apart.status == 200)
        // The address the request came from, digits of any script, text compared as typed.
        #expect(throws: ServiceError.self) { try SignInRequests.checkApart("57", from: "Desk 10.0.0.57") }
        #expect(throws: ServiceError.self) { try SignInRequests.checkApart("57", from: "Desk \u{665}\u{667}") }
        #expect(throws: ServiceError.self) { try SignInRequests.checkApart("AB12", from: "Lab ab12") }
        try SignInRequests.checkApart("57", from: "Desk 10.0.5.7")
        try SignInRequests.checkApart("AB12", from: "Desk 127.0.0.1")
        try SignInRequests.checkApart("12", from: "Desk")
    }

    @Test("a fourth open request for a user gets 429 slow_down until one closes (push-fatigue limit)")
    func openRequestCap() throws {
        let setup = try Setup()
        let api = setup.api
        let other = try api.addClient("Wiki")
        var ids: [String] = []
        for _ in 0..<2 { ids.append(try api.startSignIn(setup.client, user: "alice")) }
        ids.append(try api.startSignIn(other, user: "alice"))
        setup.environment.clock.advance(by: 100)
        let refused = try api.backchannelAuthorize(other, user: "alice")
        #expect(refused.status == 429)
        #expect(refused.errorCode == "slow_down")
        #expect(refused.headers["Retry-After"] == "200")
        #expect(refused.errorDescription?.contains("the user has 3 sign-in requests open") == true)
        #expect(try api.answer(ids[0], decision: "deny", assertion: nil, token: setup.token).status == 200)
        #expect(try api.backchannelAuthorize(other, user: "alice").status == 200)
        #expect(try api.backchannelAuthorize(other, user: "alice").status == 429)
        setup.environment.clock.advance(by: 200)
        #expect(try api.backchannelAuthorize(other, user: "alice").status == 200)
    }

    @Test("one client holds at most 2 of a user's open requests and makes 10 an hour: the rest are for other clients")
    func clientShare() throws {
        let setup = try Setup()
        let api = setup.api
        let other = try api.addClient("Wiki")
        for _ in 0..<2 { _ = try api.startSignIn(setup.client, user: "alice") }
        let open = try api.backchannelAuthorize(setup.client, user: "alice")
        #expect(open.status == 429 && open.errorCode == "slow_down")
        #expect(open.errorDescription?.contains("the rest are kept for the user's other clients") == true)
        #expect(open.headers["Retry-After"] == "300")
        #expect(try api.backchannelAuthorize(other, user: "alice").status == 200)
        // Requests a client lets expire still count over the hour: 10 of them.
        for _ in 0..<4 {
            setup.environment.clock.advance(by: 301)
            for _ in 0..<2 { #expect(try api.backchannelAuthorize(setup.client, user: "alice").status == 200) }
        }
        setup.environment.clock.advance(by: 301)
        let hourly = try api.backchannelAuthorize(setup.client, user: "alice")
        #expect(hourly.status == 429 && hourly.errorCode == "slow_down")
        #expect(hourly.errorDescription?.contains("other clients") == true)
        #expect(try api.backchannelAuthorize(other, user: "alice").status == 200)
    }

    @Test("polling: pending, then slow_down when faster than the interval, which grows by 5 s each time")
    func pollingInterval() throws {
        let setup = try Setup()
        let api = setup.api
        let clock = setup.environment.clock
        let id = try api.startSignIn(setup.client, user: "alice")
        let first = try api.poll(setup.client, id: id)
        #expect(first.status == 400 && first.errorCode == "authorization_pending")
        let fast = try api.poll(setup.client, id: id)
        #expect(fast.status == 400 && fast.errorCode == "slow_down")
        clock.advance(by: 5)
        // The interval is 10 s now: 5 s later is still too fast, and it grows to 15.
        #expect(try api.poll(setup.client, id: id).errorCode == "slow_down")
        clock.advance(by: 15)
        #expect(try api.poll(setup.client, id: id).errorCode == "authorization_pending")
        #expect(try api.storage.signInRequest(id: id)?.pollInterval == 15)
    }

    @Test("another client's auth_req_id is invalid_grant and leaves that request's interval alone")
    func anotherClientsRequest() throws {
        let setup = try Setup()
        let api = setup.api
        let other = try api.addClient("Other app")
        let id = try api.startSignIn(setup.client, user: "alice")
        for _ in 0..<3 {
            let response = try api.poll(other, id: id)
            #expect(response.status == 400 && response.errorCode == "invalid_grant")
        }
        #expect(try api.storage.signInRequest(id: id)?.lastPolledAt == nil)
        #expect(try api.poll(setup.client, id: id).errorCode == "authorization_pending")
        #expect(try api.poll(setup.client, id: "not-an-id").errorCode == "invalid_grant")
        #expect(try api.poll(setup.client, id: String(repeating: "A", count: 43)).errorCode == "invalid_grant")
    }

    @Test("an approved request gives the client one Bearer at+jwt: sub, aud, client_id, acr, amr and device_jkt")
    func approvalAndToken() throws {
        let setup = try Setup()
        let api = setup.api
        let id = try api.startSignIn(setup.client, user: "alice", bindingMessage: "Desk 42")
        #expect(try api.poll(setup.client, id: id).errorCode == "authorization_pending")
        let answer = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id), token: setup.token)
        #expect(answer.status == 200)
        #expect(answer.json?["status"] == .string("approved"))
        setup.environment.clock.advance(by: 5)
        let response = try api.poll(setup.client, id: id)
        #expect(response.status == 200)
        #expect(response.headers["Cache-Control"] == "no-store")
        let json = try #require(response.json)
        #expect(json["token_type"] == .string("Bearer"))
        let token = try #require(json["access_token"]?.stringValue)
        let jws = try CompactJWS(parsing: token)
        #expect(jws.header["typ"] == .string("at+jwt"))
        let claims = try jws.claims()
        #expect(claims["sub"] == .string("alice"))
        #expect(claims["aud"] == .string(setup.client.id))
        #expect(claims["client_id"] == .string(setup.client.id))
        #expect(claims["iss"] == .string(TestEnvironment.issuer))
        #expect(claims["amr"] == .array(["swk", "pin"]))
        #expect(claims["acr"] == .string(KeyAuthService.keyAndPresenceACR))
        #expect(claims["device_jkt"] == .string(setup.laptop.publicKey.fingerprint))
        #expect(claims["cnf"] == nil, "the client cannot prove the device's key")
        // Once: the next poll finds it collected.
        setup.environment.clock.advance(by: 5)
        #expect(try api.poll(setup.client, id: id).errorCode == "invalid_grant")
        // A token for the client is not a device's token: the device API refuses it.
        #expect(try api.authorized("GET", "/v1/devices", token: token).status == 401)
    }

    @Test("a key-only statement gets the key-only acr; a statement outside RFC 8176's set is invalid_grant")
    func methodStatements() throws {
        let setup = try Setup()
        let api = setup.api
        let refused: [[String]] = [
            [], ["pin"], ["swk", "hwk"], ["swk", "pin", "user"], ["swk", "pwd"], ["swk", "swk"],
        ]
        let id = try api.startSignIn(setup.client, user: "alice")
        for methods in refused {
            let response = try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id, methods: methods),
                token: setup.token)
            #expect(response.status == 400 && response.errorCode == "invalid_grant", "\(methods)")
        }
        let missing = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id, claims: ["amr": .null]),
            token: setup.token)
        #expect(missing.errorCode == "invalid_grant")
        #expect(
            try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id, methods: ["hwk"]),
                token: setup.token
            ).status == 200)
        let token = try #require(try api.poll(setup.client, id: id).json?["access_token"]?.stringValue)
        let claims = try CompactJWS(parsing: token).claims()
        #expect(claims["amr"] == .array(["hwk"]))
        #expect(claims["acr"] == .string(KeyAuthService.keyOnlyACR))
    }

    @Test("a denied request answers access_denied; an expired one expired_token, and can no longer be answered")
    func deniedAndExpired() throws {
        let setup = try Setup()
        let api = setup.api
        let denied = try api.startSignIn(setup.client, user: "alice")
        #expect(
            try api.answer(denied, decision: "deny", assertion: nil, token: setup.token).json?["status"] == "denied")
        let refusal = try api.poll(setup.client, id: denied)
        #expect(refusal.status == 400 && refusal.errorCode == "access_denied")

        let expiring = try api.startSignIn(setup.client, user: "alice")
        setup.environment.clock.advance(by: 300)
        #expect(try api.poll(setup.client, id: expiring).errorCode == "expired_token")
        let late = try api.answer(
            expiring, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: expiring),
            token: setup.token)
        #expect(late.status == 400 && late.errorCode == "expired_token")
        #expect(try api.openRequests(token: setup.token).json?["requests"] == .array([]))
    }

    @Test("hostile approvals: no assertion, a replayed one, one for another request, or by another device")
    func hostileApprovals() throws {
        let setup = try Setup()
        let api = setup.api
        let id = try api.startSignIn(setup.client, user: "alice")
        let other = try api.startSignIn(setup.client, user: "alice")

        // An access token alone never approves.
        let bare = try api.answer(id, decision: "approve", assertion: nil, token: setup.token)
        #expect(bare.status == 400 && bare.errorCode == "invalid_request")
        // An assertion for another request.
        let forOther = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: other), token: setup.token)
        #expect(forOther.status == 400 && forOther.errorCode == "invalid_grant")
        // A login assertion (no auth_req_id) does not approve either.
        let login = try api.answer(
            id, decision: "approve", assertion: try api.assertion(setup.laptop), token: setup.token)
        #expect(login.errorCode == "invalid_grant")
        // A replayed assertion: its jti was claimed by the first use, whatever that use was.
        let assertion = try api.approvalAssertion(setup.laptop, id: other)
        #expect(try api.answer(other, decision: "approve", assertion: assertion, token: setup.token).status == 200)
        let replay = try api.answer(id, decision: "approve", assertion: assertion, token: setup.token)
        #expect(replay.errorCode == "invalid_grant")
        let sameRequestReplay = try api.answer(other, decision: "approve", assertion: assertion, token: setup.token)
        #expect(sameRequestReplay.status == 409 && sameRequestReplay.errorCode == "already_answered")
        // Login assertions and approvals share one replay cache.
        let approvalThenLogin = try api.approvalAssertion(setup.laptop, id: id)
        #expect(try api.login(assertion: approvalThenLogin).status == 200)
        #expect(
            try api.answer(id, decision: "approve", assertion: approvalThenLogin, token: setup.token).errorCode
                == "invalid_grant")
        // A bad signature.
        var tampered = try api.approvalAssertion(setup.laptop, id: id)
        tampered.removeLast(2)
        tampered += tampered.hasSuffix("A") ? "BB" : "AA"
        #expect(
            try api.answer(id, decision: "approve", assertion: tampered, token: setup.token).errorCode
                == "invalid_grant")
        #expect(try api.storage.signInRequest(id: id)?.status == .pending)
    }

    @Test("only an active device of the request's user answers: not bob's, not a pending or revoked one")
    func whoMayAnswer() throws {
        let setup = try Setup()
        let api = setup.api
        let id = try api.startSignIn(setup.client, user: "alice")

        // Bob's device: the request is as unknown to him as any other.
        let bobKey = try ServerTestKeys.key("bob-1")
        let bobToken = try api.activeDevice(user: "bob", key: bobKey)
        let byBob = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(bobKey, id: id), token: bobToken)
        #expect(byBob.status == 404 && byBob.errorCode == "not_found")
        #expect(try api.answer(id, decision: "deny", assertion: nil, token: bobToken).status == 404)
        #expect(try api.openRequests(token: bobToken).json?["requests"] == .array([]))
        // Bob's assertion with alice's token: the assertion must be the answering device's own.
        let mixed = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(bobKey, id: id), token: setup.token)
        #expect(mixed.errorCode == "invalid_grant")

        // A pending device of alice: it has no token, and its assertion is not the token's device.
        let phone = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: phone).status == 202)
        let byPending = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(phone, id: id), token: setup.token)
        #expect(byPending.errorCode == "invalid_grant")

        // A revoked device: its token stops working at once.
        let tablet = try ServerTestKeys.key("alice-3")
        #expect(try api.register(user: "alice", key: tablet).status == 202)
        #expect(
            try api.approveDevice(tablet.publicKey.fingerprint, approver: setup.laptop, token: setup.token).status
                == 200)
        let tabletToken = try api.accessToken(tablet)
        #expect(
            try api.authorized("DELETE", "/v1/devices/\(tablet.publicKey.fingerprint)", token: setup.token).status
                == 204)
        let byRevoked = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(tablet, id: id), token: tabletToken)
        #expect(byRevoked.status == 401 && byRevoked.errorCode == "invalid_token")
        #expect(try api.storage.signInRequest(id: id)?.status == .pending)
    }

    @Test("a request is answered once: a second answer, or a denial after the approval, gets 409")
    func answeredOnce() throws {
        let setup = try Setup()
        let api = setup.api
        let id = try api.startSignIn(setup.client, user: "alice")
        #expect(
            try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id), token: setup.token
            ).status == 200)
        let again = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id), token: setup.token)
        #expect(again.status == 409 && again.errorCode == "already_answered")
        let deny = try api.answer(id, decision: "deny", assertion: nil, token: setup.token)
        #expect(deny.status == 409)
        #expect(try api.storage.signInRequest(id: id)?.status == .approved)
    }

    @Test("revoking the approving device before the client collects turns the answer into access_denied")
    func revokedBeforeCollection() throws {
        let setup = try Setup()
        let api = setup.api
        let phone = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: phone).status == 202)
        #expect(
            try api.approveDevice(phone.publicKey.fingerprint, approver: setup.laptop, token: setup.token).status
                == 200)
        let phoneToken = try api.accessToken(phone)
        let id = try api.startSignIn(setup.client, user: "alice")
        #expect(
            try api.answer(
                id, decision: "approve", assertion: try api.approvalAssertion(phone, id: id), token: phoneToken
            )
            .status == 200)
        #expect(
            try api.authorized("DELETE", "/v1/devices/\(phone.publicKey.fingerprint)", token: setup.token).status == 204
        )
        #expect(try api.poll(setup.client, id: id).errorCode == "access_denied")
    }

    @Test("a device lists its user's open requests with the client's name, address and times, never the code")
    func deviceList() throws {
        let setup = try Setup()
        let api = setup.api
        let id = try api.startSignIn(setup.client, user: "alice", bindingMessage: "Desk 42")
        let listed = try api.openRequests(token: setup.token)
        let json = try #require(listed.json)
        let entries = try #require(json["requests"]?.arrayValue)
        #expect(entries.count == 1)
        let entry = try #require(entries.first)
        #expect(entry["id"] == .string(id))
        #expect(entry["client_name"] == .string("Support desk"))
        // Number matching: the device never sees the code it must have typed.
        #expect(entry["binding_message"] == nil)
        #expect(!listed.text.contains("Desk 42"))
        #expect(entry["kind"] == .string("backchannel"))
        #expect(entry["requested_from"] == .string(api.clientAddress))
        #expect(entry["created_at"] == .string(RFC3339.string(fromSeconds: setup.environment.clock.now)))
        #expect(entry["expires_at"] == .string(RFC3339.string(fromSeconds: setup.environment.clock.now + 300)))
        let list = try SignInRequestList(jsonValue: json)
        #expect(list.requests.map(\.id) == [id])
        #expect(try api.openRequests(token: "nonsense").status == 401)
        #expect(try api.openRequests(token: setup.token, query: ["wait": "31"]).errorCode == "invalid_request")
        #expect(try api.openRequests(token: setup.token, query: ["after": "bogus"]).errorCode == "invalid_request")
        // After the cursor of everything seen, a zero wait answers at once with the same list.
        let cursor = try #require(json["cursor"]?.stringValue)
        let again = try api.openRequests(token: setup.token, query: ["after": cursor])
        #expect(again.json?["cursor"] == .string(cursor))
    }

    @Test("a long poll wakes for a request made while it waits, and returns its cursor")
    func longPollWakes() throws {
        let setup = try Setup { configuration in
            configuration.failureLimit = 1000
            configuration.longPolls = 2
        }
        let api = setup.api
        let seen = try #require(try api.openRequests(token: setup.token).json?["cursor"]?.stringValue)
        let answer = Mutex<HTTPResponse?>(nil)
        let done = DispatchSemaphore(value: 0)
        let token = setup.token
        Thread.detachNewThread {
            let response = try? api.openRequests(token: token, query: ["wait": "20", "after": seen])
            answer.withLock { $0 = response }
            done.signal()
        }
        // The request comes after the poll started waiting.
        let deadline = ServerClock.monotonicNanoseconds() + 30_000_000_000
        while SignInRequestWatcherProbe.waiting(api) == 0, ServerClock.monotonicNanoseconds() < deadline {
            usleep(10_000)
        }
        try #require(SignInRequestWatcherProbe.waiting(api) > 0, "the long poll never started waiting")
        let id = try api.startSignIn(setup.client, user: "alice")
        // The poll waits at most 20 s.
        try #require(done.wait(timeout: .now() + 60) == .success, "the long poll never returned")
        let json = try #require(answer.withLock { $0 }?.json)
        #expect(json["requests"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [id])
        #expect(json["cursor"]?.stringValue != seen)
    }

    @Test("with no long-poll place free, a long poll is answered at once with the list as it is")
    func longPollLimit() throws {
        let setup = try Setup { configuration in
            configuration.failureLimit = 1000
            configuration.longPolls = 0
        }
        let cursor = try #require(try setup.api.openRequests(token: setup.token).json?["cursor"]?.stringValue)
        let response = try setup.api.openRequests(token: setup.token, query: ["wait": "30", "after": cursor])
        #expect(response.status == 200)
        #expect(response.json?["requests"] == .array([]))
    }

    @Test("metrics count requests by result; the cleanup purges requests past their retention")
    func metricsAndPurge() throws {
        let environment = TestEnvironment()
        let (responder, storage) = try environment.makeResponder { $0.failureLimit = 1000 }
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer, clock: environment.clock,
            storage: storage)
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let client = try api.addClient()
        let approved = try api.startSignIn(client, user: "alice")
        let denied = try api.startSignIn(client, user: "alice")
        _ = try api.answer(
            approved, decision: "approve", assertion: try api.approvalAssertion(laptop, id: approved), token: token)
        _ = try api.answer(denied, decision: "deny", assertion: nil, token: token)
        _ = try api.poll(client, id: approved)
        let text = responder.metrics.render()
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"created\"} 2"))
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"approved\"} 1"))
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"denied\"} 1"))
        #expect(text.contains("keyauth_sign_in_requests_total{result=\"poll_issued\"} 1"))

        environment.clock.advance(by: 300 + 3600 - 1)
        responder.purgeExpired()
        #expect(try storage.signInRequest(id: denied) != nil)
        environment.clock.advance(by: 2)
        responder.purgeExpired()
        #expect(try storage.signInRequest(id: denied) == nil)
        #expect(try storage.signInRequest(id: approved) == nil)
    }
}

/// Reads how many long polls wait in the responder behind a direct test API.
enum SignInRequestWatcherProbe {
    static func waiting(_ api: TestAPI) -> Int {
        (api.transport as? DirectTransport)?.responder.service.signIn.watchers.waiting ?? 0
    }
}
