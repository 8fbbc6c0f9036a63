import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// A well-formed assertion, so that tests can check it never shows up in an error.
private func sampleAssertion() throws -> String {
    try JWTBuilder(key: TestKeys.first, audience: "http://127.0.0.1").sign()
}

@Suite("KeyAuthClient error mapping and requests", .timeLimit(.minutes(10)))
struct KeyAuthClientTests {
    @Test("a token's description states its expiry without the token, even one far past Int64's seconds")
    func tokenDescription() {
        let token = AccessToken(value: "secret-token", expiresAt: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(token.description == "AccessToken(Bearer, expires 1800000000)")
        // A token file may hold any number; Int64(Double) traps beyond 2^63.
        let far = AccessToken(value: "secret-token", expiresAt: Date(timeIntervalSince1970: 1e300))
        #expect(far.description == "AccessToken(Bearer, expires \(Int64.max))")
        #expect(KeyAuthClock.fixed(Date(timeIntervalSince1970: 1e300)).seconds == .max)
    }

    @Test("authorization_pending becomes approvalPending so that the authenticator polls")
    func authorizationPending() async throws {
        let responder = try LoopbackHTTPResponder { _ in .oauthError(400, "authorization_pending", "wait") }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.requestToken(assertion: sampleAssertion())
        }
        #expect(error?.code == .approvalPending, "\(error?.message ?? "")")
        #expect(error?.oauthError?.error == .authorizationPending)
    }

    @Test(
        "access_denied, expired_token and invalid_grant are serverRejected and told apart by the OAuth code",
        arguments: ["access_denied", "expired_token", "invalid_grant"])
    func refusalsAreDistinguishable(code: String) async throws {
        let responder = try LoopbackHTTPResponder { _ in .oauthError(400, code, "refused") }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let assertion = try sampleAssertion()
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: assertion) }
        #expect(error?.code == .serverRejected)
        #expect(error?.oauthError?.error == OAuthError.Code(rawValue: code))
        #expect(error?.oauthError?.statusCode == 400)
        #expect(error?.message.contains(assertion) == false)
    }

    @Test(
        "a description that echoes a token is withheld, between spaces, in quotes, after a name or in JSON",
        arguments: ["bad token %@", "bad token \"%@\"", "assertion=%@&grant_type=x", "{\"assertion\":\"%@\"}", "(%@)"])
    func echoedTokenIsWithheld(_ template: String) async throws {
        let assertion = try sampleAssertion()
        let description = template.replacingOccurrences(of: "%@", with: assertion)
        let responder = try LoopbackHTTPResponder { _ in .oauthError(400, "invalid_grant", description) }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: assertion) }
        #expect(error?.message.contains(assertion) == false)
        #expect(error?.oauthError?.errorDescription?.contains("withheld") == true)
    }

    @Test(
        "an error code that echoes a token or holds control text is read as no OAuth body; C1 controls leave a description"
    )
    func hostileErrorCodes() async throws {
        let assertion = try sampleAssertion()
        for code in [assertion, "bad\u{1B}[2Jcode", "bad \"code\"", String(repeating: "x", count: 65)] {
            let body = JSONValue.object(["error": .string(code)]).serialized()
            let responder = try LoopbackHTTPResponder { _ in .json(400, body) }
            defer { responder.stop() }
            let client = try KeyAuthClient(serverURL: responder.url)
            let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: assertion) }
            #expect(error?.oauthError?.error == .invalidRequest, "\(code)")
            #expect(error?.message.contains(code) == false)
        }
        let responder = try LoopbackHTTPResponder { _ in
            .oauthError(400, "invalid_grant", "refused\u{9B}2J by \u{202E}policy\u{85}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: assertion) }
        let description = try #require(error?.oauthError?.errorDescription)
        #expect(!description.unicodeScalars.contains { OAuthError.isUnprintable($0) }, "\(description)")
    }

    @Test("an answer without an OAuth body gets a code from its status")
    func statusWithoutBody() async throws {
        let responder = try LoopbackHTTPResponder { _ in
            LoopbackHTTPResponder.Response(status: 502, body: Array("<html>bad gateway</html>".utf8))
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.discover() }
        #expect(error?.code == .serverRejected)
        #expect(error?.oauthError?.error == .serverError)
        #expect(error?.oauthError?.statusCode == 502)
    }

    @Test("503 carries Retry-After")
    func retryAfter() async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(503, "{\"error\":\"temporarily_unavailable\"}", headers: ["Retry-After": "7"])
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: "a.b.c") }
        #expect(error?.oauthError?.error == .temporarilyUnavailable)
        #expect(error?.oauthError?.retryAfter == 7)
        #expect(error?.retryAfter == 7)
    }

    @Test("a refused connection is transportFailed with its own message")
    func connectionRefused() async throws {
        let closed = ClosedPort()
        let client = try KeyAuthClient(serverURL: "http://127.0.0.1:\(closed.port)", timeout: 2)
        let error = await #expect(throws: KeyAuthError.self) { try await client.discover() }
        #expect(error?.code == .transportFailed)
        #expect(error?.message.contains("connection refused") == true)
    }

    @Test("a POST without a body says Content-Length: 0, which some proxies insist on")
    func emptyPost() async throws {
        let responder = try LoopbackHTTPResponder { _ in .json(404, "{\"error\":\"not_found\"}") }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 10)
        let token = AccessToken(value: "a.b.c", expiresAt: Date().addingTimeInterval(600))
        _ = await #expect(throws: KeyAuthError.self) { try await client.requestSSHCertificate(accessToken: token) }
        let request = try #require(responder.requests.first)
        #expect(request.method == "POST" && request.path == "/v1/ssh/certificates")
        #expect(request.headers["content-length"] == "0")
        #expect(request.headers["expect"] == nil)
    }

    @Test("an SSH certificate answer with escapes, more fields or a serial that is no number is refused")
    func sshCertificateAnswerShape() async throws {
        let good = "ssh-rsa-cert-v01@openssh.com AAAAHHNzaC1yc2EtY2VydA== alice@keyauth"
        let answers = Mutex([String]())
        let responder = try LoopbackHTTPResponder { _ in
            .json(201, answers.withLock { $0.isEmpty ? "{}" : $0.removeFirst() })
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 10)
        let token = AccessToken(value: "a.b.c", expiresAt: Date().addingTimeInterval(600))
        func answer(line: String, serial: String) async -> KeyAuthError? {
            let body: JSONValue = .object([
                "certificate": .string(line), "serial": .string(serial), "key_id": "k", "principals": .array(["alice"]),
                "valid_after": 1, "valid_before": 2,
            ])
            answers.withLock { $0.append(body.serialized()) }
            do {
                _ = try await client.requestSSHCertificate(accessToken: token)
                return nil
            } catch { return error }
        }
        #expect(await answer(line: good, serial: "2460963395556026973") == nil)
        for (line, serial) in [
            (good, "\u{1B}]52;c;aGk=\u{07}"), (good, ""), (good, "12a"), (good + "\u{1B}[2J", "1"),
            (good + "\r\nssh-rsa AAAA x", "1"), (good + " more", "1"), ("ssh-rsa AAAAB3Nz alice", "1"),
            ("ssh-rsa-cert-v01@openssh.com AAAA%% alice", "1"),
        ] {
            let error = await answer(line: line, serial: serial)
            #expect(error?.code == .serverRejected, "\(line.debugDescription) \(serial.debugDescription)")
        }
    }

    @Test("an answer over 1 MiB is refused while it arrives, not read to its end")
    func tooLargeAnswer() async throws {
        let padding = String(repeating: " ", count: 2 << 20)
        let responder = try LoopbackHTTPResponder { _ in .json(200, "{\"devices\":[]}" + padding) }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 10)
        let token = AccessToken(value: "a.b.c", expiresAt: Date().addingTimeInterval(600))
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: token) }
        #expect(error?.code == .serverRejected)
        #expect(error?.message == "the server at \(responder.url) sent an answer larger than 1 MiB")
    }

    @Test("a server that never answers is transportFailed after the timeout")
    func timeout() async throws {
        let responder = try LoopbackHTTPResponder { _ in nil }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url, timeout: 0.5)
        // The message names the timeout, which tells it from a refused or dropped connection; no
        // wall-clock bound is asserted, since shared CI machines make those flaky.
        let error = await #expect(throws: KeyAuthError.self) { try await client.requestToken(assertion: "a.b.c") }
        #expect(error?.code == .transportFailed)
        #expect(error?.message.contains("did not answer within") == true)
    }

    @Test("login posts the JWT bearer grant as a form and computes the expiry")
    func tokenRequest() async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"access_token\":\"abc.def.ghi\",\"token_type\":\"Bearer\",\"expires_in\":900}")
        }
        defer { responder.stop() }
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let client = try KeyAuthClient(serverURL: responder.url + "/", clock: .fixed(now))
        let assertion = try sampleAssertion()
        let token = try await client.requestToken(assertion: assertion)
        #expect(token.value == "abc.def.ghi")
        #expect(token.expiresAt == now.addingTimeInterval(900))
        #expect(!token.description.contains("abc.def.ghi"))
        let request = try #require(responder.requests.first)
        #expect(request.method == "POST")
        #expect(request.path == "/oauth/token")
        #expect(request.headers["content-type"] == "application/x-www-form-urlencoded")
        #expect(request.bodyText == "grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=\(assertion)")
    }

    @Test(
        "an expires_in past a day or near 2^63 is kept a day, a negative one is no expires_in, and the token saves",
        arguments: [("9223372036854775807", 86_400.0), ("172800", 86_400.0), ("-5", 60.0)])
    func tokenLifetimeBounds(expiresIn: String, kept: TimeInterval) async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"access_token\":\"abc.def.ghi\",\"token_type\":\"Bearer\",\"expires_in\":\(expiresIn)}")
        }
        defer { responder.stop() }
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let client = try KeyAuthClient(serverURL: responder.url, clock: .fixed(now))
        let token = try await client.requestToken(assertion: try sampleAssertion())
        #expect(token.expiresAt == now.addingTimeInterval(kept))
        let directory = TemporaryDirectory("token-lifetime")
        defer { directory.remove() }
        let store = FileCredentialsStore(directory: directory.path)
        try store.saveToken(token, account: "alice")
        #expect(try store.loadToken(account: "alice")?.expiresAt == now.addingTimeInterval(kept))
    }

    @Test("registration sends the public key and proof and reports new and existing records")
    func registration() async throws {
        let key = TestKeys.first.publicKey
        let responder = try LoopbackHTTPResponder { request in
            let status = request.headers["x-test"] == nil ? 202 : 200
            return .json(
                status, "{\"kid\":\"\(key.fingerprint)\",\"user\":\"alice\",\"name\":\"laptop\",\"status\":\"pending\"}"
            )
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let registration = try await client.registerDevice(
            publicKey: key, proof: "p.r.f", enrollment: DeviceEnrollment(user: "alice", deviceName: "laptop"))
        #expect(registration.status == .pending)
        #expect(registration.isNew)
        #expect(registration.keyID == key.fingerprint)
        let request = try #require(responder.requests.first)
        let body = try JSONValue(parsing: request.body)
        #expect(request.path == "/v1/devices")
        #expect(body["user"]?.stringValue == "alice")
        #expect(body["public_key"]?.stringValue == key.pemRepresentation)
        #expect(body["proof"]?.stringValue == "p.r.f")
        #expect(body["enrollment_code"] == nil)
    }

    @Test("a registration answer for another key id is refused")
    func registrationKeyMismatch() async throws {
        let other = TestKeys.second.publicKey.fingerprint
        let responder = try LoopbackHTTPResponder { _ in
            .json(201, "{\"kid\":\"\(other)\",\"user\":\"alice\",\"name\":\"x\",\"status\":\"active\"}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.registerDevice(
                publicKey: TestKeys.first.publicKey, proof: "p.r.f",
                enrollment: DeviceEnrollment(user: "alice", deviceName: "x"))
        }
        #expect(error?.code == .serverRejected)
    }

    @Test("device management sends the Bearer token and parses the list")
    func deviceList() async throws {
        let kid = TestKeys.first.publicKey.fingerprint
        let responder = try LoopbackHTTPResponder { request in
            guard request.headers["authorization"] == "Bearer tok.en.x" else {
                return .oauthError(401, "invalid_token", "no")
            }
            return .json(
                200,
                "{\"devices\":[{\"kid\":\"\(kid)\",\"name\":\"a\",\"status\":\"active\","
                    + "\"created_at\":\"2025-01-01T00:00:00Z\",\"last_login_at\":null}]}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let token = AccessToken(value: "tok.en.x", expiresAt: Date().addingTimeInterval(600))
        let list = try await client.listDevices(accessToken: token)
        #expect(
            list.devices == [
                Device(keyID: kid, name: "a", status: .active, createdAt: "2025-01-01T00:00:00Z", lastLoginAt: nil)
            ])
        #expect(!list.isTruncated)
        #expect(responder.requests.first?.path == "/v1/devices?limit=100")
        let bad = AccessToken(value: "other.to.ken", expiresAt: Date().addingTimeInterval(600))
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: bad) }
        #expect(error?.oauthError?.error == .invalidToken)
        #expect(error?.message.contains("other.to.ken") == false)
    }

    @Test(
        "with a server that supports DPoP, a login binds its token after one nonce challenge, and each request has a proof"
    )
    func dpopBinding() async throws {
        let device = TestKeys.first
        let kid = device.publicKey.fingerprint
        let proofs = DPoPProofVerifier()
        let responder = try LoopbackHTTPResponder { request in
            let origin = "http://" + (request.headers["host"] ?? "")
            let url = origin + request.path
            switch request.path {
            case "/.well-known/openid-configuration":
                let metadata = ServerMetadata(keyAuthServerAt: origin)
                return .json(200, metadata.jsonValue.serialized())
            case "/oauth/token":
                guard let proof = request.headers["dpop"],
                    let verified = try? proofs.verify(proof, method: "POST", url: url)
                else { return .oauthError(400, "invalid_dpop_proof", "no proof") }
                guard verified.keyThumbprint == kid else { return .oauthError(400, "invalid_dpop_proof", "key") }
                guard verified.nonce == "n-1" else {
                    var answer = LoopbackHTTPResponder.Response.oauthError(400, "use_dpop_nonce", "nonce")
                    answer.headers["DPoP-Nonce"] = "n-1"
                    return answer
                }
                return .json(200, "{\"access_token\":\"bound.to.ken\",\"token_type\":\"DPoP\",\"expires_in\":900}")
            default:
                guard request.headers["authorization"] == "DPoP bound.to.ken", let proof = request.headers["dpop"],
                    let verified = try? proofs.verify(
                        proof, method: request.method, url: url, accessToken: "bound.to.ken"),
                    verified.keyThumbprint == kid, verified.nonce == "n-1"
                else { return .oauthError(401, "invalid_token", "no") }
                return .json(200, "{\"devices\":[]}")
            }
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        #expect(try await client.shouldBindTokens(.whenSupported))
        #expect(try await !client.shouldBindTokens(.whenRequired))
        #expect(try await !client.shouldBindTokens(.never))
        let builder = DPoPProofBuilder(key: device)
        let token = try await client.requestToken(assertion: try sampleAssertion(), proofs: builder)
        #expect(token.tokenType == "DPoP")
        #expect(token.value == "bound.to.ken")
        let logins = responder.requests.filter { $0.path == "/oauth/token" }
        #expect(logins.count == 2)
        #expect(logins.map { $0.headers["dpop"] != nil } == [true, true])
        #expect(logins.first?.headers["dpop"] != logins.last?.headers["dpop"])

        let list = try await client.listDevices(accessToken: token, proofs: builder)
        #expect(list.devices.isEmpty)
        _ = try await client.listDevices(accessToken: token, proofs: builder)
        let listings = responder.requests.filter { $0.path.hasPrefix("/v1/devices") }
        // The nonce learned at login serves the requests after it; each has a proof of its own.
        #expect(listings.count == 2)
        #expect(Set(listings.compactMap { $0.headers["dpop"] }).count == 2)
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.listDevices(accessToken: token)
        }
        #expect(error?.code == .invalidArgument)
        #expect(responder.requests.count == 5)
    }

    @Test("a DPoP token that a Bearer login did not ask for is refused")
    func unaskedDPoPToken() async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"access_token\":\"abc.def.ghi\",\"token_type\":\"DPoP\",\"expires_in\":900}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.requestToken(assertion: try sampleAssertion())
        }
        #expect(error?.code == .serverRejected)
    }

    @Test("a kid that is not a fingerprint never reaches the network")
    func badKeyID() async throws {
        let responder = try LoopbackHTTPResponder { _ in LoopbackHTTPResponder.Response(status: 204) }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let token = AccessToken(value: "t", expiresAt: Date().addingTimeInterval(600))
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.revokeDevice(keyID: "../../admin", accessToken: token)
        }
        #expect(error?.code == .invalidArgument)
        #expect(responder.requests.isEmpty)
    }

    @Test("discovery reads the issuer")
    func discovery() async throws {
        let issuer = Mutex("")
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"issuer\":\"\(issuer.withLock { $0 })/keyauth\"}")
        }
        defer { responder.stop() }
        issuer.withLock { $0 = responder.url }
        let metadata = try await KeyAuthClient(serverURL: responder.url).discover()
        #expect(metadata.issuer == responder.url + "/keyauth")
    }

    @Test(
        "server URLs must be http(s) with a host and nothing that leaks",
        arguments: [
            "ftp://example.com", "example.com", "http://", "http://user:pw@example.com", "http://example.com/?a=b",
        ])
    func invalidServerURL(url: String) {
        #expect(throws: KeyAuthError.self) { try KeyAuthClient(serverURL: url) }
    }

    @Test(
        "a server URL without its scheme is refused with the URL it most likely means",
        arguments: [
            ("127.0.0.1:8080", "http://127.0.0.1:8080"), ("localhost:8080", "http://localhost:8080"),
            ("[::1]:8080", "http://[::1]:8080"), ("auth.example.com", "https://auth.example.com"),
            ("auth.example.com:8443/", "https://auth.example.com:8443"),
        ])
    func missingScheme(url: String, meant: String) {
        let error = #expect(throws: KeyAuthError.self) { try KeyAuthClient(serverURL: url) }
        #expect(
            error?.message == "the server URL must be http:// or https:// with a host name; did you mean \(meant)?")
    }

    @Test(
        "no scheme is suggested for what is not a host, nor for another scheme",
        arguments: ["alice", "ftp://example.com", "http://"])
    func noSuggestion(url: String) {
        let error = #expect(throws: KeyAuthError.self) { try KeyAuthClient(serverURL: url) }
        #expect(error?.message == "the server URL must be http:// or https:// with a host name")
    }

    @Test("a failed discovery under a path suggests the server's origin; one at the origin suggests nothing")
    func discoveryUnderPath() async throws {
        let responder = try LoopbackHTTPResponder { _ in .json(404, "{}") }
        defer { responder.stop() }
        let withPath = responder.url + "/account"
        let error = await #expect(throws: KeyAuthError.self) {
            _ = try await KeyAuthClient(serverURL: withPath).discover()
        }
        #expect(error?.message.hasPrefix("\(withPath) does not look like a keyauth server") == true)
        #expect(error?.message.hasSuffix("; did you mean \(responder.url)?") == true, "\(error?.message ?? "")")
        let atOrigin = await #expect(throws: KeyAuthError.self) {
            _ = try await KeyAuthClient(serverURL: responder.url).discover()
        }
        #expect(atOrigin?.message.contains("did you mean") == false)
        #expect(KeyAuthClient.origin(ofPathURL: "http://[::1]:8080/account") == "http://[::1]:8080")
        #expect(KeyAuthClient.origin(ofPathURL: "https://auth.example.com/x/y") == "https://auth.example.com")
    }

    @Test("the refusal of plain http names the command's flag, not the library's parameter")
    func insecureHTTPMessage() {
        let error = #expect(throws: KeyAuthError.self) { try KeyAuthClient(serverURL: "http://example.com") }
        #expect(error?.message.hasSuffix("use https://, or pass --insecure-http to accept that risk") == true)
        #expect(error?.message.contains("allowInsecureHTTP") == false)
    }

    @Test("the authenticator hooks poll through authorization_pending until the device is approved")
    func pollingHooks() async throws {
        let directory = TemporaryDirectory("keyauth-poll")
        defer { directory.remove() }
        let store = KeyPairStore(directory: directory.path)
        let counter = OutputCollector()
        let responder = try LoopbackHTTPResponder { request in
            // No discovery document: the hooks then ask for Bearer tokens, and only logins count.
            if request.path.hasPrefix("/.well-known/") { return .json(404, "{}") }
            if request.path == "/v1/devices" {
                let body = try? JSONValue(parsing: request.body)
                let pem = body?["public_key"]?.stringValue ?? ""
                let kid = (try? RSAPublicKey(pemRepresentation: Array(pem.utf8)))?.fingerprint ?? ""
                return .json(202, "{\"kid\":\"\(kid)\",\"user\":\"u\",\"name\":\"n\",\"status\":\"pending\"}")
            }
            counter.append("x")
            if counter.text.count < 3 { return .oauthError(400, "authorization_pending", "wait") }
            return .json(200, "{\"access_token\":\"a.b.c\",\"token_type\":\"Bearer\",\"expires_in\":60}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let pendingCalls = OutputCollector()
        let hooks = client.authenticatorHooks(
            enrollment: DeviceEnrollment(user: "u", deviceName: "n"),
            onApprovalPending: { _ in pendingCalls.append("p") })
        var configuration = Authenticator<AccessToken>.Configuration(audience: responder.url, keyBits: 2048)
        configuration.pollInterval = .milliseconds(20)
        let authenticator = Authenticator(
            store: store, presence: NoPresence(), configuration: configuration, hooks: hooks)
        let token = try await authenticator.login()
        #expect(token.value == "a.b.c")
        #expect(pendingCalls.text == "pp")
        #expect(counter.text.count == 3)
    }

    @Test("expired_token ends the wait for approval")
    func expiredEndsPolling() async throws {
        let directory = TemporaryDirectory("keyauth-poll")
        defer { directory.remove() }
        let store = KeyPairStore(directory: directory.path)
        let counter = OutputCollector()
        let responder = try LoopbackHTTPResponder { request in
            // No discovery document: the hooks then ask for Bearer tokens, and only logins count.
            if request.path.hasPrefix("/.well-known/") { return .json(404, "{}") }
            if request.path == "/v1/devices" {
                let body = try? JSONValue(parsing: request.body)
                let pem = Array((body?["public_key"]?.stringValue ?? "").utf8)
                let kid = (try? RSAPublicKey(pemRepresentation: pem))?.fingerprint
                return .json(202, "{\"kid\":\"\(kid ?? "")\",\"user\":\"u\",\"name\":\"n\",\"status\":\"pending\"}")
            }
            counter.append("x")
            return counter.text.count < 2
                ? .oauthError(400, "authorization_pending", "wait") : .oauthError(400, "expired_token", "too late")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        var configuration = Authenticator<AccessToken>.Configuration(audience: responder.url, keyBits: 2048)
        configuration.pollInterval = .milliseconds(20)
        let authenticator = Authenticator(
            store: store, presence: NoPresence(), configuration: configuration,
            hooks: client.authenticatorHooks(enrollment: DeviceEnrollment(user: "u", deviceName: "n")))
        let error = await #expect(throws: KeyAuthError.self) { try await authenticator.login() }
        #expect(error?.oauthError?.error == .expiredToken, "\(error?.message ?? "")")
        #expect(counter.text.count == 2)
    }
}
