import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// `kill -9` in the middle of a registration and login load, against the built binary.
///
/// The server promises (SQLite in WAL mode with `synchronous=FULL`) that whatever it acknowledged
/// was on disk before the answer left: a 201 registration and a 200 login, whose `jti` the replay
/// cache must still refuse after a restart. Only an abrupt kill tests that promise; a graceful
/// stop would flush anything left in memory.
@Suite("Crash durability", .timeLimit(.minutes(10)))
struct CrashDurabilityTests {
    /// Fixed, so that assertions signed for the first server are valid for the restarted one,
    /// which listens on another port: a refusal after the restart can only be the replay rule.
    static let issuer = "http://keyauth-crash.test"
    static let keyCount = 40
    static let clientCount = 4

    @Test(
        "every registration and login acknowledged before kill -9 is there after a restart",
        arguments: ["memory", "database"])
    func killDuringLoad(replayCache: String) throws {
        let directory = TemporaryDirectory("keyauth-crash")
        defer { directory.remove() }
        let database = directory.path + "/keyauth-server.db"
        let keys = try Self.makeKeys()

        // Load from several clients; the kill lands after a random number of acknowledged
        // registrations, plus a random fraction of a registration, with requests in flight.
        let first = try KeyAuthServerProcess(
            name: "first", database: database, issuer: Self.issuer, logPath: directory.path + "/first.log",
            extraArguments: ["--replay-cache", replayCache])
        let firstPort = try first.waitUntilListening()
        let record = LoadRecord()
        let clients = DispatchGroup()
        for client in 0..<Self.clientCount {
            let mine = keys.indices.filter { $0 % Self.clientCount == client }.map { ($0, keys[$0]) }
            clients.enter()
            Thread { [port = firstPort] in
                Self.runClient(keys: mine, port: port, record: record)
                clients.leave()
            }.start()
        }
        let target = Int.random(in: 8...(Self.keyCount - 12))
        let deadline = ServerClock.monotonicNanoseconds() + 20_000_000_000
        while record.registeredCount < target, !record.hasFailures, ServerClock.monotonicNanoseconds() < deadline {
            usleep(500)
        }
        usleep(UInt32.random(in: 0...4000))
        let killed = first.kill()
        record.stop()
        #expect(clients.wait(timeout: .now() + 15) == .success, "a client hung after the kill")
        #expect(killed)

        let load = record.snapshot()
        #expect(load.failures.isEmpty, "answers other than 201/200 before the kill: \(load.failures.prefix(5))")
        try #require(load.registered.count >= target, "only \(load.registered.count) of \(target) registrations")
        #expect(load.registered.count < Self.keyCount, "the kill came after the registration load")
        #expect(!load.accepted.isEmpty)

        // The first program to open the database after the crash is the admin command.
        let listing = try KeyAuthServerProcess.runCommand(["devices", "--json", "--db", database])
        #expect(listing.status == 0, "keyauth-server devices failed after the crash: \(listing.error)")
        let listed = Self.parseDevices(listing.output)
        for index in load.registered {
            let kid = keys[index].publicKey.fingerprint
            #expect(listed[kid]?.user == Self.user(index), "acknowledged registration \(index) is missing")
            #expect(listed[kid]?.status == "active", "acknowledged registration \(index) is not active")
        }
        let known = Set(keys.map(\.publicKey.fingerprint))
        #expect(Set(listed.keys).isSubset(of: known), "the database lists devices nobody registered")
        try Self.checkIntegrity(database: database)

        // Restart on the same file: no accepted assertion is accepted twice, and every
        // acknowledged device logs in. A memory cache lost its claims in the crash: it refuses
        // every assertion issued before the restart + 10 s, so fresh logins wait for that.
        let second = try KeyAuthServerProcess(
            name: "second", database: database, issuer: Self.issuer, logPath: directory.path + "/second.log",
            extraArguments: ["--replay-cache", replayCache])
        let transport = SocketTransport(port: try second.waitUntilListening())
        let startedAt = Int64(Date().timeIntervalSince1970)
        for (index, assertion) in load.accepted {
            let response = try transport.send(Self.loginRequest(assertion))
            #expect(response.status == 400, "an assertion of device \(index) was accepted twice")
            #expect(response.errorCode == "invalid_grant")
            let reason = replayCache == "memory" ? "before the server restarted after a crash" : "already used"
            #expect(response.errorDescription?.contains(reason) == true, "\(response.text)")
        }
        if replayCache == "memory" {
            let response = try transport.send(Self.loginRequest(try Self.assertion(keys[load.registered[0]])))
            if Int64(Date().timeIntervalSince1970) < startedAt + 5 {
                #expect(response.status == 400, "a fresh assertion within the restart's window was accepted")
                #expect(response.errorDescription?.contains("sign a new one in") == true, "\(response.text)")
            }
            // The horizon is the dead server's lease (up to 5 s past the kill) + 10 s.
            while Int64(Date().timeIntervalSince1970) <= startedAt + ReplayGuard.leaseSeconds + 11 {
                usleep(200_000)
            }
        }
        for index in load.registered {
            let response = try transport.send(Self.loginRequest(try Self.assertion(keys[index])))
            #expect(response.status == 200, "device \(index) cannot log in after the restart: \(response.text)")
        }
        // The replays still fail once fresh assertions pass.
        for (index, assertion) in load.accepted.prefix(20) {
            #expect(try transport.send(Self.loginRequest(assertion)).status == 400, "device \(index) replayed")
        }
        #expect(second.terminate() == 0)
        try Self.checkIntegrity(database: database)
    }

    // MARK: - Load

    /// Registers each key in turn, logging in twice after each registration with devices already
    /// registered, until the record says stop; after the last key it keeps logging in, so the
    /// kill always lands under load.
    private static func runClient(keys: [(Int, RSAPrivateKey)], port: UInt16, record: LoadRecord) {
        let transport = SocketTransport(port: port)
        var registered: [(Int, RSAPrivateKey)] = []
        var next = 0
        var round = 0
        while !record.isStopped {
            if next < keys.count {
                let (index, key) = keys[next]
                next += 1
                do {
                    let response = try transport.send(try registrationRequest(index: index, key: key))
                    if response.status == 201 {
                        record.registered(index)
                        registered.append((index, key))
                    } else {
                        record.failed("registration \(index): \(response.status) \(response.text)")
                    }
                } catch {
                    // No answer: the server is gone, or going. Nothing was acknowledged.
                }
            }
            for _ in 0..<2 where !registered.isEmpty && !record.isStopped {
                let (index, key) = registered[round % registered.count]
                round += 1
                do {
                    let assertion = try assertion(key)
                    let response = try transport.send(loginRequest(assertion))
                    if response.status == 200 {
                        record.accepted(index, assertion)
                    } else {
                        record.failed("login \(index): \(response.status) \(response.text)")
                    }
                } catch {
                    // As above.
                }
            }
            if registered.isEmpty && next >= keys.count { return }
        }
    }

    private static func user(_ index: Int) -> String { "crash-user-\(index)" }

    /// A device assertion that stays within its lifetime for the whole test (300 s, the maximum).
    private static func assertion(_ key: RSAPrivateKey) throws -> String {
        try JWTBuilder(key: key, audience: issuer, lifetime: 300).sign()
    }

    private static func registrationRequest(index: Int, key: RSAPrivateKey) throws -> HTTPRequest {
        let body: JSONValue = .object([
            "user": .string(user(index)), "name": .string("crash-device-\(index)"),
            "public_key": .string(key.publicKey.pemRepresentation), "proof": .string(try assertion(key)),
        ])
        return HTTPRequest(
            method: "POST", path: "/v1/devices", headers: ["Content-Type": "application/json"],
            body: Array(body.serialized().utf8))
    }

    private static func loginRequest(_ assertion: String) -> HTTPRequest {
        let form = "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(assertion))"
        return HTTPRequest(
            method: "POST", path: "/oauth/token", headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: Array(form.utf8))
    }

    /// Forty RSA-2048 keys, one per user, generated on two threads (shared with nothing else).
    private static func makeKeys() throws -> [RSAPrivateKey] {
        DispatchQueue.concurrentPerform(iterations: keyCount) { index in
            _ = try? ServerTestKeys.key("crash-\(index)")
        }
        return try (0..<keyCount).map { try ServerTestKeys.key("crash-\($0)") }
    }

    // MARK: - Inspecting the database

    /// `KID USER NAME STATUS CREATED LAST_LOGIN` lines by kid.
    private static func parseDevices(_ output: String) -> [String: (user: String, status: String)] {
        var devices: [String: (user: String, status: String)] = [:]
        for device in (try? JSONValue(parsing: output))?.arrayValue ?? [] {
            guard let kid = device["kid"]?.stringValue, let user = device["user"]?.stringValue,
                let status = device["status"]?.stringValue
            else { continue }
            devices[kid] = (user, status)
        }
        return devices
    }

    /// SQLite's own consistency check, and the journal mode the crash guarantee depends on.
    private static func checkIntegrity(database: String) throws {
        let connection = try SQLiteConnection(path: database, busyTimeoutMilliseconds: 5000)
        #expect(try connection.query("PRAGMA integrity_check") { $0.text(0) ?? "" } == ["ok"])
        #expect(try connection.query("PRAGMA journal_mode") { $0.text(0) ?? "" } == ["wal"])
    }
}

/// What the clients saw acknowledged, shared between their threads and the test.
private final class LoadRecord: Sendable {
    struct Snapshot {
        /// Indexes of keys whose registration got 201.
        var registered: [Int] = []
        /// Assertions that got 200, with the index of their key.
        var accepted: [(Int, String)] = []
        /// Answers that should not happen while the server runs normally.
        var failures: [String] = []
        var isStopped = false
    }

    private let state = Mutex(Snapshot())

    var registeredCount: Int { state.withLock { $0.registered.count } }
    var hasFailures: Bool { state.withLock { !$0.failures.isEmpty } }
    var isStopped: Bool { state.withLock { $0.isStopped } }

    func registered(_ index: Int) { state.withLock { $0.registered.append(index) } }
    func accepted(_ index: Int, _ assertion: String) { state.withLock { $0.accepted.append((index, assertion)) } }
    /// Records a failure, unless it came after the kill (a response racing the signal).
    func failed(_ text: String) { state.withLock { if !$0.isStopped { $0.failures.append(text) } } }
    func stop() { state.withLock { $0.isStopped = true } }
    func snapshot() -> Snapshot { state.withLock { $0 } }
}
