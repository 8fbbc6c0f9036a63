import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `acr_values` at `/bc-authorize` and `/authorize` (PROTOCOL.md sections 8 and 10,
/// "Authentication context"): a relying party that asks for an attested device gets a sign-in
/// only from one, and the tokens' `acr` says which class was met.
@Suite("Authentication context: acr_values in CIBA and the OpenID provider", .timeLimit(.minutes(10)))
struct AuthenticationContextTests {
    static let attested = AuthenticationContextClass.attested.rawValue
    static let hardwareKey = AuthenticationContextClass.hardwareKey.rawValue
    static let deviceKey = AuthenticationContextClass.deviceKey.rawValue

    /// Stores `key` as an active device of `user` of `tier`, as an attested registration leaves
    /// it (the round trip itself is AttestedRegistrationTests'; the real one is `attestedTPM`).
    static func storeDevice(
        _ key: RSAPrivateKey, user: String = "alice", tier: DeviceTier, in storage: any ServerStorage, at time: Int64
    ) throws {
        let record = DeviceRecord(
            kid: key.publicKey.fingerprint, user: user, name: "tpm-desktop",
            publicKeyPEM: key.publicKey.pemRepresentation,
            status: .active, createdAt: time, approvedAt: time, tier: tier)
        #expect(try storage.insertDevice(record))
    }

    /// alice's laptop (a key file, `software`), her desktop (`attested`), their tokens, a client.
    private struct Setup {
        let environment = TestEnvironment()
        let api: TestAPI
        let laptop: RSAPrivateKey
        let laptopToken: String
        let desktop: RSAPrivateKey
        let desktopToken: String
        let client: TestClient

        init() throws {
            api = try environment.directAPI { $0.failureLimit = 1000 }
            laptop = try ServerTestKeys.key("alice-1")
            laptopToken = try api.activeDevice(user: "alice", key: laptop)
            desktop = try ServerTestKeys.key("alice-2")
            try AuthenticationContextTests.storeDevice(
                desktop, tier: .attested, in: api.storage, at: environment.clock.now)
            desktopToken = try api.accessToken(desktop)
            client = try api.addClient()
        }

        /// A CIBA request for alice asking `acrValues`; its `auth_req_id`.
        func start(acrValues: String?, scope: String = "openid") throws -> String {
            var extra = [("binding_message", "AB12"), ("scope", scope)]
            if let acrValues { extra.append(("acr_values", acrValues)) }
            let response = try api.backchannelAuthorize(client, user: "alice", extra: extra)
            guard response.status == 200, let id = response.json?["auth_req_id"]?.stringValue else {
                throw TestFailure("bc-authorize failed: \(response.status) \(response.text)")
            }
            return id
        }

        /// The token response of request `id`, polled after the interval.
        func collect(_ id: String) throws -> JSONValue {
            environment.clock.advance(by: 5)
            let response = try api.poll(client, id: id)
            guard response.status == 200, let json = response.json else {
                throw TestFailure("poll failed: \(response.status) \(response.text)")
            }
            return json
        }
    }

    /// The claims of a compact JWS, unverified (the flows' own tests verify the signatures).
    static func claims(_ token: JSONValue?) throws -> JSONValue {
        .object(try CompactJWS(parsing: try #require(token?.stringValue)).claims())
    }

    @Test("acr_values keeps keyauth's classes in order, once each, drops others, and refuses more than 1024 bytes")
    func parsing() throws {
        let parsed = try #require(
            RequestedAuthenticationContext(
                parameter: "urn:example:gold \(Self.attested) \(Self.hardwareKey) \(Self.attested)"))
        #expect(parsed.values == [Self.attested, Self.hardwareKey])
        #expect(RequestedAuthenticationContext(parameter: nil)?.isRequirement == false)
        #expect(RequestedAuthenticationContext(parameter: "urn:example:gold")?.isRequirement == false)
        #expect(RequestedAuthenticationContext(parameter: String(repeating: "a", count: 1025)) == nil)
    }

    @Test("each class is met by the tiers and statements it names, and a stored class this server lacks by none")
    func classes() {
        let tiers: [DeviceTier] = [.software, .tpmUnverified, .attested]
        func met(_ value: String, _ methods: [String]) -> [Bool] {
            tiers.map { RequestedAuthenticationContext(stored: [value]).achieved(tier: $0, methods: methods) != nil }
        }
        #expect(met(Self.deviceKey, ["swk"]) == [true, true, true])
        #expect(met(AuthenticationContextClass.deviceKeyAndPresence.rawValue, ["swk"]) == [false, false, false])
        #expect(met(AuthenticationContextClass.deviceKeyAndPresence.rawValue, ["swk", "pin"]) == [true, true, true])
        #expect(met(Self.hardwareKey, ["hwk"]) == [false, true, true])
        #expect(met(Self.attested, ["hwk", "user"]) == [false, false, true])
        #expect(met(Self.attested, ["swk", "pin"]) == [false, false, false], "a device that says key file is one")
        #expect(met("urn:keyauth:acr:future", ["hwk", "pin"]) == [false, false, false])
        // Without a requirement, the class of the statement, as before acr_values.
        let none = RequestedAuthenticationContext(stored: [])
        #expect(none.achieved(tier: .software, methods: ["swk", "pin"]) == KeyAuthService.keyAndPresenceACR)
        #expect(none.achieved(tier: .attested, methods: ["hwk"]) == KeyAuthService.keyOnlyACR)
        // The first class asked for that the approval meets.
        let either = RequestedAuthenticationContext(stored: [Self.attested, Self.deviceKey])
        #expect(either.achieved(tier: .attested, methods: ["hwk"]) == Self.attested)
        #expect(either.achieved(tier: .software, methods: ["swk"]) == Self.deviceKey)
    }

    @Test("CIBA with acr_values attested: a key file's approval is refused and the request waits for the attested one")
    func backchannelAttested() throws {
        let setup = try Setup()
        let api = setup.api
        let id = try setup.start(acrValues: Self.attested)
        #expect(try api.storage.signInRequest(id: id)?.acrValues == [Self.attested])

        // The laptop learns it before its user types a PIN, and again if it approves anyway.
        let check = try api.checkCode(id, code: "AB12", token: setup.laptopToken)
        #expect(check.status == 403)
        #expect(check.errorCode == "access_denied")
        #expect(check.errorDescription?.contains("tier attested") == true)
        #expect(check.errorDescription?.contains("this device's tier is software") == true)
        let refused = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: id),
            token: setup.laptopToken)
        #expect(refused.status == 403)
        #expect(refused.errorCode == "access_denied")
        #expect(refused.errorDescription?.contains("amr swk pin") == true)
        #expect(try api.storage.signInRequest(id: id)?.status == .pending)
        #expect(try api.poll(setup.client, id: id).errorCode == "authorization_pending")
        // An attested device stating a key file is taken at its word.
        let contradicted = try api.answer(
            id, decision: "approve", assertion: try api.approvalAssertion(setup.desktop, id: id, methods: ["swk"]),
            token: setup.desktopToken)
        #expect(contradicted.status == 403)

        #expect(try api.checkCode(id, code: "AB12", token: setup.desktopToken).status == 200)
        let approved = try api.answer(
            id, decision: "approve",
            assertion: try api.approvalAssertion(setup.desktop, id: id, methods: ["hwk", "pin"]),
            token: setup.desktopToken)
        #expect(approved.status == 200, "\(approved.text)")
        let json = try setup.collect(id)
        let access = try Self.claims(json["access_token"])
        #expect(access["acr"] == .string(Self.attested))
        #expect(access["amr"] == .array(["hwk", "pin"]))
        #expect(access["device_tier"] == "attested")
        #expect(access["device_jkt"] == .string(setup.desktop.publicKey.fingerprint))
        #expect(try Self.claims(json["id_token"])["acr"] == .string(Self.attested))
    }

    @Test("CIBA: unknown acr_values are voluntary, and a list with a weaker class of ours lets a key file in")
    func backchannelVoluntary() throws {
        let setup = try Setup()
        let api = setup.api
        let unknown = try setup.start(acrValues: "urn:example:gold")
        #expect(try api.storage.signInRequest(id: unknown)?.acrValues == [])
        #expect(
            try api.answer(
                unknown, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: unknown),
                token: setup.laptopToken
            ).status == 200)
        let achieved = try Self.claims(try setup.collect(unknown)["access_token"])
        #expect(achieved["acr"] == .string(KeyAuthService.keyAndPresenceACR))
        #expect(achieved["device_tier"] == "software")

        let either = try setup.start(acrValues: "\(Self.attested) \(Self.deviceKey)")
        #expect(
            try api.answer(
                either, decision: "approve", assertion: try api.approvalAssertion(setup.laptop, id: either),
                token: setup.laptopToken
            ).status == 200)
        #expect(try Self.claims(try setup.collect(either)["id_token"])["acr"] == .string(Self.deviceKey))

        let long = try api.backchannelAuthorize(
            setup.client, user: "alice", extra: [("acr_values", String(repeating: "x", count: 1025))])
        #expect(long.status == 400)
        #expect(long.errorCode == "invalid_request")
    }

    @Test("discovery lists the acr values keyauth knows")
    func discovery() throws {
        let setup = try Setup()
        let json = try #require(setup.api.send("GET", "/.well-known/openid-configuration").json)
        #expect(
            json["acr_values_supported"]
                == .array(AuthenticationContextClass.allCases.map { JSONValue.string($0.rawValue) }))
        #expect(json["acr_values_supported"]?.arrayValue?.contains(.string(Self.attested)) == true)
    }

    @Test("the code flow with acr_values attested, over a socket: only the attested device's approval signs in")
    func authorizationCodeFlow() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.failureLimit = 1000 }
        let api = environment.socketAPI(runner)
        let laptopKey = try ServerTestKeys.key("alice-1")
        let laptop = ApprovingDevice(
            api: api, key: laptopKey, token: try api.activeDevice(user: "alice", key: laptopKey))
        let desktopKey = try ServerTestKeys.key("alice-2")
        try Self.storeDevice(desktopKey, tier: .attested, in: api.storage, at: environment.clock.now)
        let desktop = ApprovingDevice(api: api, key: desktopKey, token: try api.accessToken(desktopKey))
        let client = try OpenIDTestAPI.addClient(api)

        // Signed in by the laptop, without acr_values.
        var browser = OpenIDBrowser(api: api)
        let plain = try OpenIDTestAPI.signIn(
            &browser, device: laptop, OpenIDTestAPI.authorization(client, pkce: try PKCE()))
        #expect(try OpenIDTestAPI.redirect(plain).parameters["code"] != nil)

        // That session does not meet attested: prompt=none is login_required, else a new sign-in.
        let pkce = try PKCE()
        let asking = OpenIDTestAPI.authorization(client, pkce: pkce, changes: ["acr_values": Self.attested])
        let silent = try OpenIDTestAPI.redirect(
            try browser.get(
                "/authorize",
                query: OpenIDTestAPI.authorization(
                    client, pkce: pkce, changes: ["acr_values": Self.attested, "prompt": "none"])))
        #expect(silent.parameters["error"] == "login_required")
        #expect(silent.parameters["error_description"]?.contains("acr_values") == true)
        let continueForm = try OpenIDTestAPI.startSignIn(&browser, asking)
        let request = try #require(try laptop.requests().last?["id"]?.stringValue)
        let refused = try api.answer(
            request, decision: "approve", assertion: try api.approvalAssertion(laptopKey, id: request),
            token: laptop.token)
        #expect(refused.status == 403)
        #expect(refused.errorCode == "access_denied")
        let stillWaiting = try browser.post("/authorize/continue", form: continueForm)
        #expect(stillWaiting.status == 200, "the request waits for a device that meets it")

        let approved = try api.answer(
            request, decision: "approve",
            assertion: try api.approvalAssertion(desktopKey, id: request, methods: ["hwk", "pin"]), token: desktop.token
        )
        #expect(approved.status == 200, "\(approved.text)")
        let done = try OpenIDTestAPI.redirect(try browser.post("/authorize/continue", form: continueForm))
        let code = try #require(done.parameters["code"])
        let tokens = try OpenIDTestAPI.redeem(api, client, code: code, verifier: pkce.verifier)
        #expect(tokens.status == 200, "\(tokens.text)")
        let idToken = try Self.claims(tokens.json?["id_token"])
        #expect(idToken["acr"] == .string(Self.attested))
        #expect(idToken["amr"] == .array(["hwk", "pin"]))
        let access = try Self.claims(tokens.json?["access_token"])
        #expect(access["acr"] == .string(Self.attested))
        #expect(access["device_tier"] == "attested")

        // The session the desktop signed in now answers attested requests at once.
        let again = try PKCE()
        let quick = try OpenIDTestAPI.redirect(
            try browser.get(
                "/authorize",
                query: OpenIDTestAPI.authorization(
                    client, pkce: again, changes: ["acr_values": Self.hardwareKey, "prompt": "none"])))
        let quickTokens = try OpenIDTestAPI.redeem(
            api, client, code: try #require(quick.parameters["code"]), verifier: again.verifier)
        #expect(try Self.claims(quickTokens.json?["id_token"])["acr"] == .string(Self.hardwareKey))
    }

    @Test("a TPM registered attested against swtpm approves a CIBA request asking for attested; acr says so")
    func attestedTPM() throws {
        let (environment, device) = try AttestedClient.trusted()
        let api = device.api
        let registered = try device.register(user: "alice").final
        #expect(registered.json?["tier"] == "attested", "\(registered.text)")
        let login = try api.login(assertion: try device.proof())
        let token = try #require(login.json?["access_token"]?.stringValue)
        let client = try api.addClient()

        let started = try api.backchannelAuthorize(
            client, user: "alice", extra: [("acr_values", Self.attested), ("scope", "openid")])
        let id = try #require(started.json?["auth_req_id"]?.stringValue)
        var claims = JWTClaims()
        claims.set(AuthenticationMethod.requestClaim, string: id)
        claims.set(AuthenticationMethod.codeClaim, string: try api.code(of: id))
        claims.set("amr", strings: ["hwk"])
        let assertion = try JWTBuilder(key: try device.signer, audience: api.issuer, clock: api.clock.clock).sign(
            claims: claims)
        let answer = try api.answer(id, decision: "approve", assertion: assertion, token: token)
        #expect(answer.status == 200, "\(answer.text)")
        environment.clock.advance(by: 5)
        let json = try #require(try api.poll(client, id: id).json)
        #expect(try Self.claims(json["id_token"])["acr"] == .string(Self.attested))
        #expect(try Self.claims(json["access_token"])["device_tier"] == "attested")
    }
}
