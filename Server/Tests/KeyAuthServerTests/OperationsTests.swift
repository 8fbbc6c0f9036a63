import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

@Suite("Operations: routing, health, metrics, discovery")
struct OperationsTests {
    @Test("an unknown path gives 404 not_found and a known path with a wrong method 405 with Allow")
    func notFoundAndMethodNotAllowed() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        for path in ["/", "/v1", "/v1/devices/", "/v1/devices/a/b/c", "/oauth/token/x", "/v1/devices/abc/deny"] {
            let response = try api.send("GET", path)
            #expect(response.status == 404, "\(path)")
            #expect(response.errorCode == "not_found")
        }
        for (method, path, allowed) in [
            ("GET", "/oauth/token", "POST"), ("PUT", "/v1/devices", "GET, POST"), ("POST", "/healthz", "GET, HEAD"),
            ("GET", "/v1/devices/abc", "DELETE"), ("GET", "/v1/devices/abc/approve", "POST"),
        ] {
            let response = try api.send(method, path)
            #expect(response.status == 405, "\(method) \(path)")
            #expect(response.errorCode == "method_not_allowed")
            #expect(response.headers["Allow"] == allowed)
        }
    }

    @Test("a body the transport found too large gives 413 invalid_request")
    func payloadTooLarge() throws {
        let environment = TestEnvironment()
        let (responder, _) = try environment.makeResponder()
        let response = responder.respond(to: HTTPRequest(method: "POST", path: "/v1/devices", bodyTooLarge: true))
        #expect(response.status == 413)
        #expect(response.errorCode == "invalid_request")
    }

    @Test("/healthz answers ok, and 503 temporarily_unavailable with Retry-After when storage fails")
    func health() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let healthy = try api.send("GET", "/healthz")
        #expect(healthy.status == 200)
        #expect(healthy.json == .object(["status": "ok"]))
        api.storage.close()
        let down = try api.send("GET", "/healthz")
        #expect(down.status == 503)
        #expect(down.errorCode == "temporarily_unavailable")
        #expect(down.json?["status"] == "unhealthy")
        #expect(down.json?["check"] == "storage_read")
        #expect(down.headers["Retry-After"] == "5")
        let login = try api.login(ServerTestKeys.key("alice-1"))
        #expect(login.status == 503)
        #expect(login.errorCode == "temporarily_unavailable")
    }

    @Test("/healthz writes to storage at most once a second, however many probes come")
    func healthWritesSparingly() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let start = ServerClock.monotonicNanoseconds()
        for _ in 0..<200 { #expect(try api.send("GET", "/healthz").status == 200) }
        let seconds = ServerClock.nanoseconds(from: start, to: ServerClock.monotonicNanoseconds()) / 1_000_000_000
        let connection = try SQLiteConnection(path: environment.databasePath, busyTimeoutMilliseconds: 1000)
        let probes = try connection.query("SELECT probes FROM health_probes") { $0.integer(0) }
        #expect(probes.count == 1)
        let written = try #require(probes.first ?? nil)
        #expect(written >= 1 && written <= Int64(seconds) + 1)
    }

    @Test("the latency histogram counts each request in every bucket it fits, and keeps count and sum per route")
    func latencyHistogramBuckets() {
        let metrics = ServerMetrics()
        metrics.recordRequest(route: "/oauth/token", method: "POST", status: 200, seconds: 0.002)
        metrics.recordRequest(route: "/oauth/token", method: "POST", status: 200, seconds: 0.3)
        metrics.recordRequest(route: "/oauth/token", method: "POST", status: 400, seconds: 0.001)
        metrics.recordRequest(route: "/healthz", method: "GET", status: 200, seconds: 7)
        let lines = Set(metrics.render().split(separator: "\n").map(String.init))
        let token = "keyauth_http_request_duration_seconds_bucket{route=\"/oauth/token\",le="
        for (bound, count) in [
            ("0.001", 1), ("0.0025", 2), ("0.005", 2), ("0.1", 2), ("0.25", 2), ("0.5", 3), ("5.0", 3), ("+Inf", 3),
        ] {
            #expect(lines.contains("\(token)\"\(bound)\"} \(count)"), "le=\(bound)")
        }
        #expect(lines.contains("keyauth_http_request_duration_seconds_count{route=\"/oauth/token\"} 3"))
        let sum = 0.002 + 0.3 + 0.001
        #expect(lines.contains("keyauth_http_request_duration_seconds_sum{route=\"/oauth/token\"} \(sum)"))
        // Slower than the largest bound: only in +Inf.
        #expect(lines.contains("keyauth_http_request_duration_seconds_bucket{route=\"/healthz\",le=\"5.0\"} 0"))
        #expect(lines.contains("keyauth_http_request_duration_seconds_bucket{route=\"/healthz\",le=\"+Inf\"} 1"))
        #expect(lines.contains("keyauth_http_request_duration_seconds_count{route=\"/healthz\"} 1"))
    }

    @Test("/metrics counts requests, logins, registrations and latency, and is served on the metrics listener only")
    func metrics() throws {
        let environment = TestEnvironment()
        let (responder, storage) = try environment.makeResponder()
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer, clock: environment.clock,
            storage: storage)
        let key = try ServerTestKeys.key("alice-1")
        _ = try api.activeDevice(user: "alice", key: key)
        _ = try api.login(assertion: "x.y.z")
        _ = try api.send("GET", "/nowhere/secret-token-in-path")
        let response = responder.operations.respond(to: HTTPRequest(method: "GET", path: "/metrics"))
        #expect(response.status == 200)
        #expect(response.headers["Content-Type"]?.hasPrefix("text/plain; version=0.0.4") == true)
        let text = response.text
        #expect(text.contains("keyauth_http_requests_total{route=\"/oauth/token\",method=\"POST\",status=\"200\"} 1"))
        #expect(text.contains("keyauth_http_requests_total{route=\"/oauth/token\",method=\"POST\",status=\"400\"} 1"))
        #expect(text.contains("keyauth_http_requests_total{route=\"unknown\",method=\"GET\",status=\"404\"} 1"))
        #expect(text.contains("keyauth_logins_total{result=\"success\"} 1"))
        #expect(text.contains("keyauth_logins_total{result=\"invalid_grant\"} 1"))
        #expect(text.contains("keyauth_registrations_total{result=\"active\"} 1"))
        #expect(text.contains("# TYPE keyauth_http_request_duration_seconds histogram"))
        #expect(text.contains("keyauth_http_request_duration_seconds_count{route=\"/oauth/token\"} 2"))
        #expect(text.contains("keyauth_http_request_duration_seconds_bucket{route=\"/oauth/token\",le=\"+Inf\"} 2"))
        #expect(!text.contains("secret-token-in-path"))
        let publicMetrics = try api.send("GET", "/metrics")
        #expect(publicMetrics.status == 404)
        #expect(publicMetrics.errorCode == "not_found")
    }

    @Test("the periodic cleanup forgets replay-cache entries a minute after the assertion could no longer be accepted")
    func cleanup() throws {
        let environment = TestEnvironment()
        let (responder, storage) = try environment.makeResponder()
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer, clock: environment.clock,
            storage: storage)
        let key = try ServerTestKeys.key("alice-1")
        let assertion = try api.assertion(key)
        #expect(try api.register(user: "alice", key: key, proof: assertion).status == 201)
        let jti = try #require(try CompactJWS(parsing: assertion).claims()["jti"]?.stringValue)
        // Accepted until exp (30 s) plus the leeway (10 s): the entry must outlive that.
        environment.clock.advance(by: 40)
        responder.purgeExpired()
        #expect(try api.login(assertion: assertion).errorCode == "invalid_grant")
        #expect(try storage.claimJTI(keyID: key.publicKey.fingerprint, jti: jti, expiresAt: 0) == false)
        // And for the margin past that, in which an instance whose clock is behind this one's
        // still accepts it (``ClockSkewCheck``).
        environment.clock.advance(by: ClockSkewCheck.purgeMargin)
        responder.purgeExpired()
        #expect(try storage.claimJTI(keyID: key.publicKey.fingerprint, jti: jti, expiresAt: 0) == false)
        environment.clock.advance(by: 1)
        responder.purgeExpired()
        #expect(try storage.claimJTI(keyID: key.publicKey.fingerprint, jti: jti, expiresAt: 0))
    }

    @Test("the OpenID configuration names the issuer, endpoints, grants, algorithm and CIBA's poll mode")
    func discovery() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let response = try api.send("GET", "/.well-known/openid-configuration")
        #expect(response.status == 200)
        let json = try #require(response.json)
        #expect(json["issuer"]?.stringValue == TestEnvironment.issuer)
        #expect(json["token_endpoint"]?.stringValue == TestEnvironment.issuer + "/oauth/token")
        #expect(json["jwks_uri"]?.stringValue == TestEnvironment.issuer + "/.well-known/jwks.json")
        #expect(
            json["grant_types_supported"]
                == .array([
                    .string(TestAPI.jwtBearer), .string("urn:openid:params:grant-type:ciba"), "authorization_code",
                ]))
        #expect(json["token_endpoint_auth_signing_alg_values_supported"] == .array(["RS256"]))
        #expect(json["backchannel_authentication_endpoint"]?.stringValue == TestEnvironment.issuer + "/bc-authorize")
        #expect(json["backchannel_token_delivery_modes_supported"] == .array(["poll"]))
        #expect(json["backchannel_user_code_parameter_supported"] == .bool(false))
        #expect(
            json["token_endpoint_auth_methods_supported"]
                == .array(["client_secret_basic", "client_secret_post", "none"]))
        // The OpenID Connect provider's members (PROTOCOL.md section 10).
        let expected: [String: JSONValue] = [
            "authorization_endpoint": .string(TestEnvironment.issuer + "/authorize"),
            "userinfo_endpoint": .string(TestEnvironment.issuer + "/userinfo"),
            "end_session_endpoint": .string(TestEnvironment.issuer + "/end-session"),
            "response_types_supported": .array(["code"]), "response_modes_supported": .array(["query"]),
            "code_challenge_methods_supported": .array(["S256"]), "subject_types_supported": .array(["public"]),
            "id_token_signing_alg_values_supported": .array(["RS256"]),
            "scopes_supported": .array(["openid", "profile"]),
            "authorization_response_iss_parameter_supported": true,
            "prompt_values_supported": .array(["none", "login", "consent"]),
        ]
        for (name, value) in expected { #expect(json[name] == value, "\(name)") }
        #expect(json["claims_supported"]?.arrayValue?.contains("nonce") == true)
        #expect(json["claims_supported"]?.arrayValue?.contains("urn:openid:params:jwt:claim:auth_req_id") == true)
    }

    @Test("the request log has client, method, path, status, duration, route, error, user and kid, and no token")
    func requestLog() throws {
        let environment = TestEnvironment()
        let lines = CapturingLog()
        let storage = try environment.openStorage()
        let responder = try KeyAuthResponder(
            configuration: try environment.configuration { $0.logRequests = true }, issuer: TestEnvironment.issuer,
            storage: storage, log: lines, now: environment.clock.closure)
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer, clock: environment.clock,
            storage: storage)
        let key = try ServerTestKeys.key("alice-1")
        let kid = key.publicKey.fingerprint
        let token = try api.activeDevice(user: "alice", key: key)
        _ = try api.authorized("GET", "/v1/devices", token: token)
        _ = try api.send("GET", "/\(token)")
        _ = try api.login(ServerTestKeys.key("mallory-1"))
        let logged = lines.lines
        #expect(logged.count == 5)
        #expect(logged[0].contains(" 192.0.2.1 POST /v1/devices 201 "))
        #expect(logged[0].hasSuffix("ms route=/v1/devices user=alice kid=\(kid)"))
        #expect(logged[1].contains(" 192.0.2.1 POST /oauth/token 200 "))
        #expect(logged[1].hasSuffix("ms route=/oauth/token user=alice kid=\(kid)"))
        #expect(logged[2].contains(" GET /v1/devices 200 "))
        #expect(logged[2].hasSuffix("ms route=/v1/devices user=alice kid=\(kid)"))
        #expect(logged[3].hasSuffix("ms route=unknown error=not_found"))
        // A refused login names no user or key: the client only claimed them.
        #expect(logged[4].contains(" POST /oauth/token 400 "))
        #expect(logged[4].hasSuffix("ms route=/oauth/token error=invalid_grant"))
        #expect(!logged.joined().contains(token))
        #expect(!logged.joined().contains("BEGIN"))
    }
}

/// Collects log lines for inspection.
final class CapturingLog: ServerLog {
    private let storage = LockedLines()

    var lines: [String] { storage.all }

    func write(line: String) {
        storage.append(line)
    }
}

final class LockedLines: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }
}
