import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// A server on SQLite (its replay cache in memory) whose wall clock is set back while it runs or
/// across a crash, under libfaketime with an offset file: a token whose use it has forgotten, or
/// that the dead server accepted, must not look new.
@Suite("A wall clock set back while serving or across a crash", .timeLimit(.minutes(10)))
struct ClockSetBackTests {
    static let issuer = "http://keyauth.test"

    /// A server on `directory`'s database, its wall clock `clock`'s, listening.
    private static func startServer(_ name: String, in directory: String, clock: SettableClock) throws
        -> KeyAuthServerProcess
    {
        let server = try KeyAuthServerProcess(
            name: name, database: directory + "/keyauth.db", issuer: issuer, logPath: directory + "/\(name).log",
            extraArguments: ["--metrics-listen", "off"], extraEnvironment: clock.environment)
        _ = try server.waitUntilListening()
        return server
    }

    /// Requests to `server`, which is `issuer`, seeing its database through `storage`.
    private static func api(_ server: KeyAuthServerProcess, storage: any ServerStorage) -> TestAPI {
        TestAPI(
            transport: SocketTransport(port: server.port), issuer: issuer,
            clock: TestEnvironment(clockStart: ServerClock.now()).clock, storage: storage)
    }

    @Test(
        "an assertion whose use the server has forgotten is refused after its clock is set back, not accepted again",
        .enabled(
            if: ExternalTools.shouldRun(installed: SettableClock.isInstalled),
            "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
    func replayAfterSetBack() throws {
        let directory = TemporaryDirectory("keyauth-set-back")
        defer { directory.remove() }
        let clock = try SettableClock(in: directory.path)
        let server = try Self.startServer("set-back", in: directory.path, clock: clock)
        defer { _ = server.terminate() }
        let storage = try SQLiteStorage(path: directory.path + "/keyauth.db")
        defer { storage.close() }
        let api = Self.api(server, storage: storage)
        let laptop = try ServerTestKeys.key("alice-1")
        _ = try api.activeDevice(user: "alice", key: laptop)

        let now = ServerClock.now()
        let used = try api.assertion(laptop, claims: ["iat": .integer(now), "exp": .integer(now + 30)])
        #expect(try api.login(assertion: used).status == 200)
        // 400 s later by the server's clock, a login takes the expired claims out of memory.
        try clock.set("+400s")
        let later = try api.assertion(laptop, claims: ["iat": .integer(now + 400), "exp": .integer(now + 430)])
        #expect(try api.login(assertion: later).status == 200, "\(server.log)")
        // Set back: the first assertion is within its lifetime again, and was used.
        try clock.set("+0s")
        let replayed = try api.login(assertion: used)
        #expect(replayed.status == 400, "accepted twice after the clock was set back: \(replayed.text)")
        #expect(replayed.errorDescription?.contains("clock was set back") == true, "\(replayed.text)")
    }

    @Test(
        "an assertion accepted before kill -9 is refused after a restart with the clock set back, once it catches up",
        .enabled(
            if: ExternalTools.shouldRun(installed: SettableClock.isInstalled),
            "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
    func replayAfterCrashAndSetBack() throws {
        let directory = TemporaryDirectory("keyauth-crash-set-back")
        defer { directory.remove() }
        let clock = try SettableClock(in: directory.path)
        let first = try Self.startServer("first", in: directory.path, clock: clock)
        defer { _ = first.terminate() }
        let storage = try SQLiteStorage(path: directory.path + "/keyauth.db")
        defer { storage.close() }
        var api = Self.api(first, storage: storage)
        let laptop = try ServerTestKeys.key("alice-1")
        _ = try api.activeDevice(user: "alice", key: laptop)
        let now = ServerClock.now()
        let used = try api.assertion(laptop, claims: ["iat": .integer(now), "exp": .integer(now + 120)])
        #expect(try api.login(assertion: used).status == 200)
        #expect(first.kill(), "kill -9")

        // Restarted 60 s back (an NTP step at boot, a restored clock), then set right again: the
        // assertion is within its lifetime and this server never saw it. Before the lease, the
        // crash's horizon was the start + 10 s, 50 s before the assertion was issued, and it was
        // accepted a second time.
        try clock.set("-60s")
        let second = try Self.startServer("second", in: directory.path, clock: clock)
        defer { _ = second.terminate() }
        try clock.set("+0s")
        api = Self.api(second, storage: storage)
        let replayed = try api.login(assertion: used)
        #expect(replayed.status == 400, "accepted twice after a crash and a clock set back: \(replayed.text)")
        #expect(
            replayed.errorDescription?.contains("before the server restarted after a crash") == true, "\(replayed.text)"
        )
        // Fresh assertions are accepted once the clock has passed the dead server's lease + 10 s.
        try clock.set("+20s")
        let fresh = try api.assertion(laptop, claims: ["iat": .integer(now + 20), "exp": .integer(now + 80)])
        let login = try api.login(assertion: fresh)
        #expect(login.status == 200, "\(login.text) \(second.log)")
    }
}
