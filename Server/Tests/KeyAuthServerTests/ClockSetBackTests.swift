import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// A server on SQLite (its replay cache in memory) whose wall clock is set back while it runs,
/// under libfaketime with an offset file: a token whose use it has forgotten must not look new.
@Suite("A wall clock set back while serving", .timeLimit(.minutes(10)))
struct ClockSetBackTests {
    static let issuer = "http://keyauth.test"

    @Test(
        "an assertion whose use the server has forgotten is refused after its clock is set back, not accepted again",
        .enabled(
            if: ExternalTools.shouldRun(installed: SettableClock.isInstalled),
            "libfaketime is missing: apt-get install faketime (scripts/install-deps.sh)"))
    func replayAfterSetBack() throws {
        let directory = TemporaryDirectory("keyauth-set-back")
        defer { directory.remove() }
        let clock = try SettableClock(in: directory.path)
        let databasePath = directory.path + "/keyauth.db"
        let server = try KeyAuthServerProcess(
            name: "set-back", database: databasePath, issuer: Self.issuer, logPath: directory.path + "/server.log",
            extraArguments: ["--metrics-listen", "off"], extraEnvironment: clock.environment)
        defer { _ = server.terminate() }
        let port = try server.waitUntilListening()
        let storage = try SQLiteStorage(path: databasePath)
        defer { storage.close() }
        let api = TestAPI(
            transport: SocketTransport(port: port), issuer: Self.issuer,
            clock: TestEnvironment(clockStart: ServerClock.now()).clock, storage: storage)
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
}
