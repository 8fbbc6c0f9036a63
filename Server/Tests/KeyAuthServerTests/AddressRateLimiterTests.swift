import Dispatch
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

@Suite("Rate limits by address: IPv6 /64s, bounded memory, registrations", .timeLimit(.minutes(10)))
struct AddressRateLimiterTests {
    @Test(
        "an IPv6 /64 is one address, an IPv4-mapped address is its IPv4 address",
        arguments: [
            ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", true),
            ("2001:db8:1:2::1", "2001:db8:1:3::1", false),
            ("::ffff:192.0.2.7", "192.0.2.7", true),
            ("::ffff:192.0.2.7", "192.0.2.8", false),
            ("192.0.2.7", "192.0.2.7", true),
            ("fe80::1", "fe80::2", true),
            // An IPv6 prefix whose low half reads like an IPv4 address is still IPv6.
            ("::c000:207", "192.0.2.7", false),
        ])
    func keys(_ first: String, _ second: String, _ same: Bool) {
        #expect((RateLimitKey(address: first) == RateLimitKey(address: second)) == same)
        #expect(RateLimitKey(parsing: first) != nil)
    }

    @Test("failures from many addresses of one IPv6 /64 share one budget; another /64 is unaffected")
    func ipv6Prefix() throws {
        let environment = TestEnvironment()
        var attacker = try environment.directAPI()
        for host in 1...10 {
            attacker.clientAddress = "2001:db8:bad:1::\(String(host, radix: 16))"
            #expect(try attacker.login(assertion: "not.a.token").errorCode == "invalid_grant")
        }
        attacker.clientAddress = "2001:db8:bad:1:dead:beef:0:1"
        let limited = try attacker.login(assertion: "not.a.token")
        #expect(limited.status == 429)
        #expect(limited.errorCode == "slow_down")
        attacker.clientAddress = "2001:db8:bad:2::1"
        #expect(try attacker.login(assertion: "not.a.token").errorCode == "invalid_grant")
    }

    @Test("of many concurrent attempts at once, exactly the limit are admitted")
    func concurrentAdmissions() {
        let limiter = AddressRateLimiter(limit: 10, window: 60, now: { 1000 })
        let key = RateLimitKey(address: "192.0.2.7")
        let admitted = Atomic(0)
        DispatchQueue.concurrentPerform(iterations: 200) { _ in
            if limiter.admit(key) == nil { admitted.add(1, ordering: .relaxed) }
        }
        #expect(admitted.load(ordering: .relaxed) == 10)
        #expect(limiter.admit(key) == 60)
    }

    @Test("at most maximumAddresses are tracked; the least recently counted go first")
    func evictionBound() {
        let limiter = AddressRateLimiter(limit: 1, window: 60, maximumAddresses: 160, now: { 1000 })
        let kept = RateLimitKey(address: "198.51.100.1")
        limiter.record(kept)
        for index in 0..<10_000 {
            limiter.record(.ipv4(0x0A00_0000 + UInt32(index)))
            // Counted again now and then, so it stays among the most recent of its shard.
            if index % 4 == 0 { limiter.record(kept) }
        }
        #expect(limiter.trackedAddresses == 160)
        #expect(limiter.retryAfter(for: kept) == 60)
        #expect(limiter.retryAfter(for: .ipv4(0x0A00_0000 + 9_999)) == 60)
        #expect(limiter.retryAfter(for: .ipv4(0x0A00_0000)) == nil)
    }

    @Test("the periodic purge forgets addresses whose events left the window")
    func purge() {
        let clock = TestClock(1000)
        let limiter = AddressRateLimiter(limit: 3, window: 60, now: clock.closure)
        for index in 0..<500 { limiter.record(.ipv4(UInt32(index))) }
        clock.advance(by: 30)
        limiter.record(.ipv4(7))
        clock.advance(by: 31)
        limiter.purge()
        #expect(limiter.trackedAddresses == 1)
        clock.advance(by: 30)
        limiter.purge()
        #expect(limiter.trackedAddresses == 0)
    }

    @Test("the window slides: the retry time is that of the oldest counted event")
    func slidingWindow() {
        let clock = TestClock(1000)
        let limiter = AddressRateLimiter(limit: 3, window: 60, now: clock.closure)
        let key = RateLimitKey(address: "203.0.113.5")
        for step in 0..<5 {
            limiter.record(key)
            if step < 4 { clock.advance(by: 10) }
        }
        // Events at 1000, 1010, 1020, 1030, 1040; the latest three count at 1040.
        #expect(limiter.retryAfter(for: key) == 40)
        clock.advance(by: 40)
        #expect(limiter.retryAfter(for: key) == nil)
    }

    @Test("threads counting at once lose no event and track every address")
    func concurrency() {
        let shared = RateLimitKey(address: "192.0.2.1")
        let limiter = AddressRateLimiter(limit: 800, window: 3600, now: { 1000 })
        let oneShort = AddressRateLimiter(limit: 801, window: 3600, now: { 1000 })
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for index in 0..<1000 {
                limiter.record(.ipv4(0x0A00_0000 + UInt32(thread * 1000 + index)))
                if index % 10 == 0 {
                    limiter.record(shared)
                    oneShort.record(shared)
                }
                _ = limiter.retryAfter(for: shared)
            }
        }
        #expect(limiter.trackedAddresses == 8001)
        #expect(limiter.retryAfter(for: shared) == 3600)
        #expect(oneShort.retryAfter(for: shared) == nil)
    }

    @Test("each registration attempt counts, successful or not: the 21st in a minute gets 429; others register")
    func registrationBudget() throws {
        let environment = TestEnvironment()
        var api = try environment.directAPI()
        api.clientAddress = "198.51.100.20"
        let key = try ServerTestKeys.key("alice-1")
        var statuses: [Int] = []
        for _ in 0..<20 { statuses.append(try api.register(user: "alice", key: key).status) }
        #expect(statuses == [201] + Array(repeating: 200, count: 19))
        let limited = try api.register(user: "alice", key: key)
        #expect(limited.status == 429)
        #expect(limited.errorCode == "slow_down")
        #expect(limited.headers["Retry-After"] == "60")
        // Logins are not registrations.
        #expect(try api.login(key).status == 200)
        var other = api
        other.clientAddress = "198.51.100.21"
        #expect(try other.register(user: "bob", key: try ServerTestKeys.key("bob-1")).status == 201)
        environment.clock.advance(by: 60)
        #expect(try api.register(user: "alice", key: key).status == 200)
    }

    @Test("over sockets: 21 registrations from one address get a 429 while another address still registers")
    func registrationBudgetOverSockets() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer()
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let key = try ServerTestKeys.key("alice-1")
        var statuses: [Int] = []
        for _ in 0..<21 { statuses.append(try api.register(user: "alice", key: key).status) }
        #expect(statuses == [201] + Array(repeating: 200, count: 19) + [429])
        let other = TestAPI(
            transport: SocketTransport(port: runner.port, sourceAddress: "127.0.0.2"), issuer: runner.issuer,
            clock: environment.clock, storage: runner.storage)
        #expect(try other.register(user: "bob", key: try ServerTestKeys.key("bob-1")).status == 201)
    }

    @Test("--registration-limit and KEYAUTH_SERVER_REGISTRATION_LIMIT set the budget, 20 by default")
    func registrationLimitFlag() throws {
        func limit(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Int {
            try serveConfiguration(arguments, environment).registrationLimit
        }
        #expect(try limit([]) == 20)
        #expect(try limit(["--registration-limit", "5"]) == 5)
        #expect(try limit([], ["KEYAUTH_SERVER_REGISTRATION_LIMIT": "100"]) == 100)
        #expect(throws: ServerConfigurationError.self) { _ = try limit(["--registration-limit", "0"]) }
    }
}
