import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

/// The clocks' agreement as a running server watches it (``ClockSkewMonitor``): what the log says
/// when it changes, and `/healthz` while the clocks differ by more than the leeway.
@Suite("Clock skew while serving")
struct ClockSkewMonitorTests {
    @Test("each change of agreement is said once; within the warning bound nothing is said")
    func changes() {
        let monitor = ClockSkewMonitor()
        #expect(monitor.record(server: 1000, database: 999) == nil)
        #expect(monitor.refusal == nil)
        let drifting = monitor.record(server: 1000, database: 995)
        #expect(
            drifting?.line == "this server's clock is 5 s ahead of the database's; keep every "
                + "instance's clock synchronized (NTP)")
        #expect(drifting?.level == .warning)
        #expect(monitor.record(server: 1000, database: 994) == nil, "still drifting: said once")
        let off = monitor.record(server: 1000, database: 1030)
        #expect(off?.line.hasPrefix("this server's clock is 30 s behind the database's, more than the 10 s") == true)
        #expect(off?.line.contains("this instance answers 503 (/healthz too) until the clocks agree again") == true)
        #expect(off?.level == .error)
        #expect(monitor.refusal == "this server's clock is 30 s behind the database's")
        #expect(monitor.record(server: 1000, database: 1040) == nil, "still off: said once")
        #expect(monitor.refusal == "this server's clock is 40 s behind the database's", "the latest reading")
        let back = monitor.record(server: 1000, database: 1003)
        #expect(back?.level == .notice)
        #expect(back?.line.contains("/healthz passes the clock check again") == true)
        #expect(monitor.refusal == nil)
        #expect(monitor.record(server: 1000, database: 1000)?.level == .notice)
        // Nonsense from the database saturates rather than traps.
        #expect(monitor.record(server: .max, database: .min)?.level == .error)
    }

    @Test("past the leeway the instance says so to every request's check, and knows the database's time")
    func pastLeewayAndOffset() {
        let monitor = ClockSkewMonitor()
        #expect(!monitor.isPastLeeway)
        #expect(monitor.databaseOffset == 0, "before any reading")
        _ = monitor.record(server: 1070, database: 1000)
        #expect(monitor.isPastLeeway)
        #expect(monitor.databaseOffset == -70)
        _ = monitor.record(server: 1000, database: 1008)
        #expect(!monitor.isPastLeeway, "within the leeway, past the warning")
        #expect(monitor.databaseOffset == 8)
        _ = monitor.record(server: 1000, database: 989)
        #expect(monitor.isPastLeeway)
        _ = monitor.record(server: .max, database: .min)
        #expect(monitor.isPastLeeway)
        #expect(monitor.databaseOffset == .min, "saturated, not trapped")
    }

    @Test("a step of the wall clock since the last reading refuses requests and asks for a reading, once")
    func stepsBetweenReadings() {
        let monitor = ClockSkewMonitor()
        let steps = Mutex<[Int64]>([])
        monitor.whenStepped { moved in steps.withLock { $0.append(moved) } }
        // Before any reading (SQLite): nothing is compared.
        #expect(!monitor.refusesRequests(wallOffset: 500_000_000_000))
        _ = monitor.record(server: 1000, database: 1000, wallOffset: 100_000_000_000)
        #expect(!monitor.refusesRequests(wallOffset: 100_000_000_000))
        #expect(!monitor.refusesRequests(wallOffset: 101_500_000_000), "1.5 s: within the bound")
        #expect(monitor.refusesRequests(wallOffset: 170_000_000_000), "set 70 s forward")
        #expect(monitor.refusesRequests(wallOffset: 100_000_000_000), "refused until the next reading")
        #expect(monitor.wasSetSinceReading)
        #expect(steps.withLock { $0 } == [70_000_000_000], "the handler is called once per step")
        // The reading the handler asked for: the clocks agree, from the new wall offset on.
        _ = monitor.record(server: 1070, database: 1070, wallOffset: 170_000_000_000)
        #expect(!monitor.refusesRequests(wallOffset: 170_000_000_000))
        #expect(!monitor.wasSetSinceReading)
        #expect(monitor.refusesRequests(wallOffset: 160_000_000_000), "set 10 s back")
        #expect(steps.withLock { $0 } == [70_000_000_000, -10_000_000_000])
        // Nonsense readings saturate rather than trap.
        _ = monitor.record(server: 1000, database: 1000, wallOffset: .max)
        #expect(monitor.refusesRequests(wallOffset: .min))
    }

    @Test("the start's verdict, which serve reported, is not said again by the first cleanup")
    func seededByTheStart() {
        let monitor = ClockSkewMonitor()
        // The start's reading, whose line serve writes itself (ServerRunner discards this one).
        _ = monitor.record(server: 1004, database: 1000)
        #expect(monitor.record(server: 1004, database: 1000) == nil)
        #expect(monitor.record(server: 1000, database: 1000)?.level == .notice)
    }

    @Test("/healthz fails the clock check while the clocks differ by more than the leeway, and passes after")
    func healthFailsOnTheClock() throws {
        let environment = TestEnvironment()
        let (responder, _) = try environment.makeResponder()
        let monitor = responder.service.clockSkew
        _ = monitor.record(server: 1000, database: 1060)
        let off = responder.respond(to: HTTPRequest(method: "GET", path: "/healthz"))
        #expect(off.status == 503)
        #expect(off.json?["check"] == "clock")
        #expect(off.json?["error"] == "temporarily_unavailable")
        #expect(off.json?["error_description"] == "this server's clock is too far from the database's")
        _ = monitor.record(server: 1000, database: 1001)
        #expect(responder.respond(to: HTTPRequest(method: "GET", path: "/healthz")).status == 200)
    }

    @Test("a cleanup on a host whose clock runs ahead purges sign-in requests and devices by the database's time")
    func cleanupByTheDatabasesTime() throws {
        let environment = TestEnvironment()
        let (responder, storage) = try environment.makeResponder()
        let now = environment.clock.now
        // A request that expired a minute ago, and a device denied a minute ago: both kept for
        // their retention (an hour, a day) by the database's time.
        let request = SignInRequestRecord(
            id: Base64URL.encode([UInt8](repeating: 7, count: 32)), kind: .backchannel, clientID: nil, user: "alice",
            bindingMessage: "42", scope: nil, requestedFrom: "192.0.2.9", createdAt: now - 360, expiresAt: now - 60)
        guard
            case .inserted = try storage.insertSignInRequest(request, limits: StorageContract.threeOpen, now: now - 360)
        else {
            Issue.record("the request was not stored")
            return
        }
        let key = try ServerTestKeys.key("alice-2")
        let device = DeviceRecord(
            kid: key.publicKey.fingerprint, user: "alice", name: "desk", publicKeyPEM: key.publicKey.pemRepresentation,
            status: .pending, createdAt: now - 120)
        #expect(try storage.insertDevice(device))
        #expect(try storage.updateStatus(kid: device.kid, from: .pending, to: .denied, at: now - 60))
        // This host's clock is two days ahead of the database's, which the last comparison found.
        environment.clock.advance(by: 2 * 86_400)
        _ = responder.service.clockSkew.record(server: environment.clock.now, database: now)
        responder.purgeExpired()
        #expect(try storage.signInRequest(id: request.id) != nil)
        #expect(try storage.device(kid: device.kid) != nil)
    }
}
