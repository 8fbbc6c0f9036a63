import KeyAuth
import KeyAuthServer
import Testing

@Suite("Rate limiting of failed logins and registrations")
struct RateLimitTests {
    @Test("after 10 failures an address gets 429 slow_down with Retry-After; other addresses are unaffected")
    func limitPerAddress() throws {
        let environment = TestEnvironment()
        var attacker = try environment.directAPI()
        attacker.clientAddress = "198.51.100.7"
        var user = attacker
        user.clientAddress = "203.0.113.9"
        let key = try ServerTestKeys.key("alice-1")
        #expect(try user.register(user: "alice", key: key).status == 201)

        for _ in 0..<10 {
            #expect(try attacker.login(assertion: "not.a.token").errorCode == "invalid_grant")
        }
        let limited = try attacker.login(key)
        #expect(limited.status == 429)
        #expect(limited.errorCode == "slow_down")
        #expect(limited.headers["Retry-After"] == "60")
        #expect(try attacker.register(user: "bob", key: try ServerTestKeys.key("bob-1")).status == 429)

        #expect(try user.login(key).status == 200)

        environment.clock.advance(by: 30)
        #expect(try attacker.login(key).headers["Retry-After"] == "30")
        environment.clock.advance(by: 30)
        #expect(try attacker.login(key).status == 200)
    }

    @Test("the limit is configurable")
    func configurable() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 2 }
        #expect(try api.token(form: "grant_type=x").status == 400)
        #expect(try api.token(form: "grant_type=x").status == 400)
        #expect(try api.token(form: "grant_type=x").status == 429)
    }

    @Test("X-Forwarded-For is ignored unless --trust-proxy, then its last hop is the address")
    func forwardedFor() throws {
        let environment = TestEnvironment()
        let direct = try environment.directAPI { $0.failureLimit = 1 }
        #expect(try direct.send("POST", "/oauth/token", headers: ["X-Forwarded-For": "10.0.0.1"]).status == 400)
        #expect(try direct.send("POST", "/oauth/token", headers: ["X-Forwarded-For": "10.0.0.2"]).status == 429)

        let proxied = try TestEnvironment().directAPI {
            $0.failureLimit = 1
            $0.trustProxy = true
        }
        let spoofed: HTTPHeaders = ["X-Forwarded-For": "1.1.1.1, 10.0.0.1"]
        #expect(try proxied.send("POST", "/oauth/token", headers: spoofed).status == 400)
        #expect(
            try proxied.send("POST", "/oauth/token", headers: ["X-Forwarded-For": "2.2.2.2, 10.0.0.1"]).status == 429)
        #expect(try proxied.send("POST", "/oauth/token", headers: ["X-Forwarded-For": "10.0.0.2"]).status == 400)
    }
}
