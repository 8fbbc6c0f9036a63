import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// DPoP (RFC 9449) at the server: tokens bound to the device key at the token endpoint, and the
/// resource endpoints refusing a bound token without its proof, or with a hostile one. The
/// hostile proofs are built by PyJWT, an independent implementation, so that each is exactly the
/// defect it names and nothing of keyauth's own builder.
@Suite("DPoP-bound tokens at the server", .timeLimit(.minutes(10)))
struct DPoPTests {
    /// Writes one proof per case as a JSON object, from a description on standard input.
    static let pyJWTProofs = #"""
        import sys, json, jwt
        from jwt.algorithms import RSAAlgorithm
        from cryptography.hazmat.primitives import serialization
        spec = json.load(sys.stdin)
        def load(path):
            return serialization.load_pem_private_key(open(path, "rb").read(), password=None)
        device, other = load(spec["device"]), load(spec["other"])
        out = {}
        for name, case in spec["cases"].items():
            key = other if case.get("other_key") else device
            jwk = RSAAlgorithm.to_jwk(key if case.get("private_jwk") else key.public_key(), as_dict=True)
            header = {"typ": case.get("typ", "dpop+jwt"), "jwk": jwk}
            if case.get("no_jwk"):
                del header["jwk"]
            alg = case.get("alg", "RS256")
            signing_key = {"RS256": key, "HS256": "a shared secret", "none": None}[alg]
            out[name] = jwt.encode(case["claims"], signing_key, algorithm=alg, headers=header)
        print(json.dumps(out))
        """#

    @Test("a token request with a proof of the device key gets a DPoP-bound token; one by another key is refused")
    func tokenEndpointBinds() throws {
        let fixture = try Fixture()
        let response = try fixture.login(proof: try fixture.proof(method: "POST", path: "/oauth/token"))
        #expect(response.status == 200, "\(response.text)")
        #expect(response.json?["token_type"]?.stringValue == "DPoP")
        let token = try #require(response.json?["access_token"]?.stringValue)
        let claims = try JWTClaims(#require(try CompactJWS(parsing: token).claims()))
        #expect(claims["cnf"]?["jkt"]?.stringValue == fixture.device.publicKey.fingerprint)
        #expect(claims["client_id"]?.stringValue == fixture.device.publicKey.fingerprint)

        let other = try ServerTestKeys.key("dpop-other")
        let foreign = try DPoPProofBuilder(key: other, clock: fixture.clock.clock).proof(
            method: "POST", url: fixture.url("/oauth/token"))
        let refused = try fixture.login(proof: foreign)
        #expect(refused.status == 400)
        #expect(refused.errorCode == "invalid_dpop_proof")
        #expect(refused.errorDescription?.contains("not signed by the assertion's device key") == true)
        // A proof for the wrong endpoint, and two proofs at once.
        let wrongURL = try fixture.login(proof: try fixture.proof(method: "POST", path: "/v1/devices"))
        #expect(wrongURL.status == 400 && wrongURL.errorCode == "invalid_dpop_proof", "\(wrongURL.text)")
        var headers: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]
        headers.add("DPoP", try fixture.proof(method: "POST", path: "/oauth/token"))
        headers.add("DPoP", try fixture.proof(method: "POST", path: "/oauth/token"))
        let twice = try fixture.api.send(
            "POST", "/oauth/token", headers: headers, body: Array(try fixture.loginForm().utf8))
        #expect(twice.status == 400 && twice.errorCode == "invalid_dpop_proof", "\(twice.text)")
        // Without a proof, where proofs are optional: a Bearer token.
        let plain = try fixture.api.login(fixture.device)
        #expect(plain.json?["token_type"]?.stringValue == "Bearer")
    }

    @Test("discovery lists the proof algorithms, and whether bound tokens are required")
    func discovery() throws {
        for mode in DPoPMode.allCases {
            let api = try TestEnvironment().directAPI { $0.dpop = mode }
            let document = try api.send("GET", "/.well-known/openid-configuration").json
            #expect(
                document?["dpop_signing_alg_values_supported"]?.arrayValue?.compactMap(\.stringValue) == [
                    "RS256", "ES256", "EdDSA",
                ])
            #expect(document?["dpop_bound_access_tokens_required"] == .bool(mode == .required))
        }
    }

    @Test("a bound token works with its proof and is refused as Bearer, without a proof, or with a replayed one")
    func resourceEndpointsRequireTheProof() throws {
        let fixture = try Fixture()
        let token = try fixture.boundToken()
        let proof = try fixture.proof(method: "GET", path: "/v1/devices", token: token)
        let accepted = try fixture.get(token: token, scheme: "DPoP", proof: proof)
        #expect(accepted.status == 200, "\(accepted.text)")

        let replayed = try fixture.get(token: token, scheme: "DPoP", proof: proof)
        #expect(replayed.status == 401)
        #expect(replayed.errorCode == "invalid_dpop_proof")
        #expect(replayed.errorDescription?.contains("already used") == true)
        #expect(replayed.headers["WWW-Authenticate"]?.hasPrefix("DPoP error=\"invalid_dpop_proof\"") == true)

        // The copied token alone is worth nothing (RFC 9449 section 7.2).
        let asBearer = try fixture.get(token: token, scheme: "Bearer", proof: nil)
        #expect(asBearer.status == 401)
        #expect(asBearer.errorCode == "invalid_token")
        let withoutProof = try fixture.get(token: token, scheme: "DPoP", proof: nil)
        #expect(withoutProof.status == 401 && withoutProof.errorCode == "invalid_dpop_proof")
        // A Bearer token presented with the DPoP scheme is refused too.
        let bearerToken = try fixture.api.accessToken(fixture.device)
        let mislabelled = try fixture.get(
            token: bearerToken, scheme: "DPoP",
            proof: try fixture.proof(method: "GET", path: "/v1/devices", token: bearerToken))
        #expect(mislabelled.status == 401 && mislabelled.errorCode == "invalid_token")
        #expect(try fixture.get(token: bearerToken, scheme: "Bearer", proof: nil).status == 200)
    }

    @Test(
        "hostile proofs built with PyJWT are refused with invalid_dpop_proof; a correct PyJWT proof passes, once",
        arguments: [false, true])
    func hostileProofs(overSocket: Bool) throws {
        let environment = TestEnvironment()
        let runner = overSocket ? try environment.startServer() : nil
        defer { runner?.stop() }
        let fixture = try Fixture(environment: environment, api: runner.map { environment.socketAPI($0) })
        let token = try fixture.boundToken()
        let now = fixture.clock.now
        let url = fixture.url("/v1/devices")
        let ath = try DPoPProofVerifier.accessTokenHash(token)
        func claims(
            htm: String = "GET", htu: String? = nil, iat: Int64? = nil, ath athValue: String? = nil,
            jti: String? = UUID().uuidString
        ) -> [String: Any] {
            var claims: [String: Any] = ["htm": htm, "htu": htu ?? url, "iat": iat ?? now, "ath": athValue ?? ath]
            if athValue == "" { claims["ath"] = nil }
            if let jti { claims["jti"] = jti }
            return claims
        }
        let cases: [String: [String: Any]] = [
            "valid": ["claims": claims()],
            "wrong htm": ["claims": claims(htm: "POST")],
            "wrong htu path": ["claims": claims(htu: fixture.url("/v1/devices/other"))],
            "wrong htu host": ["claims": claims(htu: "https://evil.example/v1/devices")],
            "old iat": ["claims": claims(iat: now - DPoPProofVerifier.defaultWindow - 1)],
            "future iat": ["claims": claims(iat: now + DPoPProofVerifier.defaultLeeway + 1)],
            "other key": ["claims": claims(), "other_key": true],
            "HS256": ["claims": claims(), "alg": "HS256"],
            "alg none": ["claims": claims(), "alg": "none"],
            "private jwk": ["claims": claims(), "private_jwk": true],
            "no jwk": ["claims": claims(), "no_jwk": true],
            "missing ath": ["claims": claims(ath: "")],
            "wrong ath": ["claims": claims(ath: try DPoPProofVerifier.accessTokenHash(token + "x"))],
            "typ JWT": ["claims": claims(), "typ": "JWT"],
            "no jti": ["claims": claims(jti: nil)],
        ]
        let proofs = try fixture.pyJWT(cases)
        for (name, proof) in proofs.sorted(by: { $0.key < $1.key }) where name != "valid" {
            let response = try fixture.get(token: token, scheme: "DPoP", proof: proof)
            #expect(response.status == 401, "\(name): \(response.text)")
            #expect(response.errorCode == "invalid_dpop_proof", "\(name): \(response.text)")
            #expect(response.headers["WWW-Authenticate"]?.contains("invalid_dpop_proof") == true, "\(name)")
        }
        let validProof = proofs["valid"] ?? ""
        let valid = try fixture.get(token: token, scheme: "DPoP", proof: validProof)
        #expect(valid.status == 200, "\(valid.text)")
        let replayed = try fixture.get(token: token, scheme: "DPoP", proof: validProof)
        #expect(replayed.status == 401 && replayed.errorCode == "invalid_dpop_proof", "\(replayed.text)")
        let asBearer = try fixture.get(token: token, scheme: "Bearer", proof: validProof)
        #expect(asBearer.status == 401, "\(asBearer.text)")
        #expect(proofs.count == cases.count)
    }

    @Test("--dpop required: a token request without a proof and a Bearer token are refused")
    func required() throws {
        let environment = TestEnvironment()
        let optional = try Fixture(environment: environment)
        let bearerToken = try optional.api.accessToken(optional.device)
        let fixture = try Fixture(environment: environment, configure: { $0.dpop = .required }, registering: false)
        let refused = try fixture.api.login(fixture.device)
        #expect(refused.status == 400)
        #expect(refused.errorCode == "invalid_dpop_proof")
        #expect(refused.errorDescription?.contains("a DPoP proof is required") == true)
        let bound = try fixture.boundToken()
        #expect(
            try fixture.get(
                token: bound, scheme: "DPoP", proof: try fixture.proof(method: "GET", path: "/v1/devices", token: bound)
            ).status == 200)
        let bearer = try fixture.get(token: bearerToken, scheme: "Bearer", proof: nil)
        #expect(bearer.status == 401 && bearer.errorCode == "invalid_token", "\(bearer.text)")
    }

    @Test("--dpop-nonce: a proof without the server's nonce gets use_dpop_nonce and a nonce, which then works")
    func nonces() throws {
        let fixture = try Fixture(configure: { $0.dpopNonce = true })
        let first = try fixture.login(proof: try fixture.proof(method: "POST", path: "/oauth/token"))
        #expect(first.status == 400)
        #expect(first.errorCode == "use_dpop_nonce")
        let nonce = try #require(first.headers["DPoP-Nonce"])
        // The same assertion again: the refused proof did not use it up.
        let assertion = try fixture.api.assertion(fixture.device)
        let second = try fixture.login(
            proof: try fixture.proof(method: "POST", path: "/oauth/token", nonce: nonce), assertion: assertion)
        #expect(second.status == 200, "\(second.text)")
        let token = try #require(second.json?["access_token"]?.stringValue)
        let fresh = try #require(second.headers["DPoP-Nonce"])

        let used = try fixture.get(
            token: token, scheme: "DPoP",
            proof: try fixture.proof(method: "GET", path: "/v1/devices", token: token, nonce: fresh))
        #expect(used.status == 200, "\(used.text)")
        fixture.clock.advance(by: ServerNonces.lifetime + 1)
        let stale = try fixture.get(
            token: token, scheme: "DPoP",
            proof: try fixture.proof(method: "GET", path: "/v1/devices", token: token, nonce: fresh))
        #expect(stale.status == 401)
        #expect(stale.errorCode == "use_dpop_nonce")
        #expect(stale.headers["WWW-Authenticate"]?.hasPrefix("DPoP error=\"use_dpop_nonce\"") == true)
        #expect(stale.headers["DPoP-Nonce"] != nil && stale.headers["DPoP-Nonce"] != fresh)
        let forged = try fixture.get(
            token: token, scheme: "DPoP",
            proof: try fixture.proof(method: "GET", path: "/v1/devices", token: token, nonce: "AAAAAAAAAAAA"))
        #expect(forged.errorCode == "use_dpop_nonce")
    }

    @Test("over a real socket: a copied DPoP-bound token is refused from another key, as Bearer, and replayed")
    func copiedTokenOverSocket() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer()
        defer { runner.stop() }
        let fixture = try Fixture(environment: environment, api: environment.socketAPI(runner))
        let token = try fixture.boundToken()
        let thief = try ServerTestKeys.key("dpop-thief")
        let stolenUse = try DPoPProofBuilder(key: thief, clock: environment.clock.clock).proof(
            method: "GET", url: fixture.url("/v1/devices"), accessToken: token)
        let refused = try fixture.get(token: token, scheme: "DPoP", proof: stolenUse)
        #expect(refused.status == 401 && refused.errorCode == "invalid_dpop_proof", "\(refused.text)")
        #expect(try fixture.get(token: token, scheme: "Bearer", proof: nil).status == 401)
        let proof = try fixture.proof(method: "GET", path: "/v1/devices", token: token)
        #expect(try fixture.get(token: token, scheme: "DPoP", proof: proof).status == 200)
        #expect(try fixture.get(token: token, scheme: "DPoP", proof: proof).status == 401)
    }

    @Test("every true/false setting of serve is a flag, bare, whatever follows it")
    func booleanSettingsAreFlags() throws {
        #expect(
            FlagParser.booleanFlags.isSuperset(of: ["trust-proxy", "quiet", "dpop-nonce", "ssh-no-port-forwarding"]))
        for arguments in [
            ["serve", "--ssh-no-port-forwarding", "--quiet"], ["serve", "--quiet", "--ssh-no-port-forwarding"],
        ] {
            guard case .serve(let flags) = try ServerCommand.parse(arguments: arguments, environment: [:]) else {
                Issue.record("not serve: \(arguments)")
                continue
            }
            #expect(flags.sshNoPortForwarding, "\(arguments)")
            #expect(!flags.logRequests, "\(arguments)")
        }
    }

    @Test("--dpop, --dpop-nonce, --token-alg and --cleanup-interval are read from flags and the environment")
    func parsing() throws {
        let arguments = [
            "serve", "--dpop", "required", "--dpop-nonce", "--token-alg", "ES256", "--cleanup-interval", "5",
        ]
        guard case .serve(let flags) = try ServerCommand.parse(arguments: arguments, environment: [:]) else {
            Issue.record("not serve")
            return
        }
        #expect(flags.dpop == .required && flags.dpopNonce && flags.tokenAlgorithm == .es256)
        #expect(flags.cleanupIntervalSeconds == 5)
        let environment = [
            "KEYAUTH_SERVER_DPOP": "required", "KEYAUTH_SERVER_DPOP_NONCE": "1", "KEYAUTH_SERVER_TOKEN_ALG": "EdDSA",
        ]
        guard case .serve(let variables) = try ServerCommand.parse(arguments: ["serve"], environment: environment)
        else {
            Issue.record("not serve")
            return
        }
        #expect(variables.dpop == .required && variables.dpopNonce && variables.tokenAlgorithm == .edDSA)
        guard case .serve(let defaults) = try ServerCommand.parse(arguments: ["serve"], environment: [:]) else {
            Issue.record("not serve")
            return
        }
        #expect(defaults.dpop == .optional && !defaults.dpopNonce && defaults.tokenAlgorithm == .rs256)
        for bad in [
            ["--dpop", "maybe"], ["--token-alg", "HS256"], ["--token-alg", "none"], ["--cleanup-interval", "0"],
        ] {
            #expect(throws: ServerConfigurationError.self) {
                try ServerCommand.parse(arguments: ["serve"] + bad, environment: [:])
            }
        }
    }

    /// A server with an active device, and requests with DPoP proofs for it.
    struct Fixture {
        /// Kept for the fixture's life: its directory holds the database the server syncs.
        let environment: TestEnvironment
        let api: TestAPI
        let clock: TestClock
        let device: RSAPrivateKey

        init(
            environment: TestEnvironment = TestEnvironment(), configure: (inout ServerConfiguration) -> Void = { _ in },
            registering: Bool = true, api: TestAPI? = nil
        ) throws {
            self.environment = environment
            self.api = try api ?? environment.directAPI(configure)
            clock = environment.clock
            device = try ServerTestKeys.key("dpop-device")
            if registering {
                let registered = try self.api.register(user: "dana", key: device)
                guard registered.status == 201 else { throw TestFailure("registration: \(registered.text)") }
            }
        }

        func url(_ path: String) -> String { api.issuer + path }

        func proof(method: String, path: String, token: String? = nil, nonce: String? = nil) throws -> String {
            try DPoPProofBuilder(key: device, clock: clock.clock).proof(
                method: method, url: url(path), accessToken: token, nonce: nonce)
        }

        func loginForm(assertion: String? = nil) throws -> String {
            "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion="
                + TestAPI.formEncode(try assertion ?? api.assertion(device))
        }

        func login(proof: String, assertion: String? = nil) throws -> HTTPResponse {
            try api.send(
                "POST", "/oauth/token", headers: ["Content-Type": "application/x-www-form-urlencoded", "DPoP": proof],
                body: Array(try loginForm(assertion: assertion).utf8))
        }

        func boundToken() throws -> String {
            let response = try login(proof: try proof(method: "POST", path: "/oauth/token"))
            guard response.status == 200, let token = response.json?["access_token"]?.stringValue else {
                throw TestFailure("DPoP login failed: \(response.text)")
            }
            return token
        }

        func get(token: String, scheme: String, proof: String?) throws -> HTTPResponse {
            var headers: HTTPHeaders = ["Authorization": "\(scheme) \(token)"]
            if let proof { headers.add("DPoP", proof) }
            return try api.send("GET", "/v1/devices", headers: headers)
        }

        /// Proofs made by PyJWT with the device key (or another), one per case.
        func pyJWT(_ cases: [String: [String: Any]]) throws -> [String: String] {
            let directory = TemporaryDirectory("keyauth-dpop")
            defer { directory.remove() }
            try SecureFile.write(try device.pkcs8PEM(), to: directory.path + "/device.pem")
            try SecureFile.write(try ServerTestKeys.key("dpop-other").pkcs8PEM(), to: directory.path + "/other.pem")
            let spec: [String: Any] = [
                "device": directory.path + "/device.pem", "other": directory.path + "/other.pem", "cases": cases,
            ]
            let input = directory.path + "/spec.json"
            try JSONSerialization.data(withJSONObject: spec).write(to: URL(fileURLWithPath: input))
            let result = try ExternalCommand.run([
                "sh", "-c", "python3 -c \"$0\" < \"$1\"", DPoPTests.pyJWTProofs, input,
            ])
            guard result.status == 0,
                let proofs = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: String]
            else { throw TestFailure("PyJWT failed: \(result.errorOutput)") }
            return proofs
        }
    }
}
