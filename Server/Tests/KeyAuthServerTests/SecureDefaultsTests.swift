import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The attacks of the "secure by default" review, replayed against the built `keyauth-server`
/// binary or a server on a real socket: each test fails on a server without the fix.
@Suite("Secure defaults: the review's attacks over real sockets", .timeLimit(.minutes(10)))
struct SecureDefaultsTests {
    static let issuer = "http://keyauth-secure.test"

    /// A started `keyauth-server serve` on a fresh SQLite file, a client for it, and the file
    /// opened as storage, to look at what the server stored.
    private struct Served {
        let directory: TemporaryDirectory
        let process: KeyAuthServerProcess
        let api: TestAPI
        let database: String

        init(enrollment: String?) throws {
            directory = TemporaryDirectory("keyauth-secure")
            database = directory.path + "/keyauth-server.db"
            process = try KeyAuthServerProcess(
                name: "server", database: database, issuer: SecureDefaultsTests.issuer,
                logPath: directory.path + "/server.log", enrollment: enrollment)
            let port = try process.waitUntilListening()
            api = TestAPI(
                transport: SocketTransport(port: port), issuer: SecureDefaultsTests.issuer,
                clock: TestClock(ServerClock.now()), storage: try SQLiteStorage(path: database))
        }

        /// A code from `keyauth-server enroll USER`, as the administrator gets it.
        func enrollmentCode(for user: String) throws -> String {
            let enrolled = try KeyAuthServerProcess.runCommand(["enroll", user, "--db", database])
            guard enrolled.status == 0 else { throw TestFailure("enroll failed: \(enrolled.error)") }
            return enrolled.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        func stop() {
            api.storage.close()
            process.terminate()
            directory.remove()
        }
    }

    @Test(
        "open enrollment: after alice's only device is revoked, a stranger registering alice gets 403, not 201")
    func revokedUserTakeover() throws {
        let served = try Served(enrollment: "open")
        defer { served.stop() }
        let api = served.api
        let laptop = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: laptop).status == 201)
        let token = try api.accessToken(laptop)
        // What `keyauth reset` does: the device revokes itself.
        #expect(try api.authorized("DELETE", "/v1/devices/\(laptop.publicKey.fingerprint)", token: token).status == 204)

        let attacker = try ServerTestKeys.key("stranger")
        let attack = try api.register(user: "alice", key: attacker, name: "alice-laptop")
        #expect(attack.status == 403, "\(attack.text)")
        #expect(attack.errorCode == "access_denied")
        #expect(attack.json?["status"] == nil)
        #expect(try api.storage.device(kid: attacker.publicKey.fingerprint) == nil)
        #expect(try api.login(attacker).errorCode == "invalid_grant")

        // Alice's new device does not wait for anyone's approval: her code brings her back.
        let phone = try ServerTestKeys.key("alice-2")
        #expect(try api.register(user: "alice", key: phone).status == 403)
        let back = try api.register(user: "alice", key: phone, code: try served.enrollmentCode(for: "alice"))
        #expect(back.status == 201, "\(back.text)")
        #expect(back.json?["status"]?.stringValue == "active")
    }

    @Test(
        "by default a new user's first device needs a code from keyauth-server enroll")
    func defaultNeedsCode() throws {
        let served = try Served(enrollment: nil)
        defer { served.stop() }
        #expect(served.process.log.contains("enrollment code"))
        // No enrollment warning (this test's issuer is plain http, which has its own).
        #expect(!served.process.log.contains("warning: --enrollment"))
        let api = served.api
        let key = try ServerTestKeys.key("bob-1")
        let refused = try api.register(user: "bob", key: key)
        #expect(refused.status == 403, "\(refused.text)")
        #expect(refused.errorCode == "access_denied")
        #expect(try api.storage.devices(user: "bob").isEmpty)
        #expect(try api.register(user: "bob", key: key, code: try served.enrollmentCode(for: "bob")).status == 201)
        #expect(try api.register(user: "bob", key: try ServerTestKeys.key("bob-2")).status == 202)
    }

    @Test(
        "open enrollment on a non-loopback address prints a warning at start")
    func openEnrollmentWarning() throws {
        let directory = TemporaryDirectory("keyauth-secure")
        defer { directory.remove() }
        for (listen, enrollment, warns) in [
            ("0.0.0.0:0", "open", true), ("127.0.0.1:0", "open", false), ("0.0.0.0:0", "code", false),
        ] {
            let process = try KeyAuthServerProcess(
                name: "\(listen) \(enrollment)",
                arguments: [
                    "serve", "--listen", listen, "--db", directory.path + "/\(enrollment)-\(warns).db",
                    "--enrollment", enrollment, "--quiet",
                ], logPath: directory.path + "/\(enrollment)-\(warns).log")
            // The banner names the address it listens on, 0.0.0.0 or 127.0.0.1.
            let deadline = ServerClock.monotonicNanoseconds() + 30_000_000_000
            while !process.log.contains("listening on"), process.isRunning,
                ServerClock.monotonicNanoseconds() < deadline
            {
                usleep(20_000)
            }
            // The warning follows the banner: waited for where it is expected, since a busy
            // machine can write it later than a fixed pause.
            let warning = "keyauth-server: warning: --enrollment open"
            let warned: Bool
            if warns {
                warned = process.logEventuallyContains(warning)
            } else {
                // Where none is expected, a short pause gives a wrong one the time to show.
                usleep(50_000)
                warned = process.log.contains(warning)
            }
            let text = process.log
            process.terminate()
            #expect(text.contains("listening on"), "\(text)")
            #expect(warned == warns, "\(listen) \(enrollment): \(text)")
        }
    }

    @Test("a flood of registrations for one user stops at 10 pending devices with 429 slow_down")
    func pendingFlood() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.failureLimit = 100_000 }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        var statuses: [Int] = []
        var retryAfter: [String] = []
        for index in 0..<14 {
            let response = try api.register(
                user: "alice", key: try ServerTestKeys.key("flood-\(index)"), name: "alice-laptop")
            statuses.append(response.status)
            if response.status == 429 {
                #expect(response.errorCode == "slow_down")
                retryAfter.append(response.headers["Retry-After"] ?? "")
            }
        }
        #expect(statuses == Array(repeating: 202, count: 10) + Array(repeating: 429, count: 4))
        // The test clock stands still: the oldest pending device expires in exactly 600 s.
        #expect(retryAfter == Array(repeating: "600", count: 4))
        #expect(try runner.storage.devices(user: "alice").filter { $0.status == .pending }.count == 10)
    }

    @Test("concurrent registrations at 9 pending devices leave exactly 10")
    func concurrentPendingRegistrations() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer {
            $0.failureLimit = 100_000
            $0.threads = 8
        }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        for index in 0..<9 {
            #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-\(index)")).status == 202)
        }
        let contenders = try (9..<17).map { try ServerTestKeys.key("flood-\($0)") }
        let statuses = runConcurrently(contenders.count) { (index: Int) throws(StorageError) -> Int in
            (try? api.register(user: "alice", key: contenders[index]).status) ?? 0
        }.map { (try? $0.get()) ?? 0 }
        #expect(statuses.filter { $0 == 202 }.count == 1, "\(statuses)")
        #expect(statuses.filter { $0 == 429 }.count == contenders.count - 1, "\(statuses)")
        #expect(try runner.storage.devices(user: "alice").filter { $0.status == .pending }.count == 10)
    }

    @Test("GET /v1/devices stays bounded however many devices a user has, and pages through all of them")
    func boundedDeviceList() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer()
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        // 2,600 devices, as the flood of the review left them (stored directly: the cap now
        // stops such a flood at 10), from many threads so that the writes share commits.
        let storage = runner.storage
        let start = environment.clock.now
        let stored = runConcurrently(52) { (thread: Int) throws(StorageError) -> Int in
            var count = 0
            for index in (thread * 50)..<(thread * 50 + 50) {
                let kid = Base64URL.encode((try? CryptoPrimitives.sha256(Array("flood-\(index)".utf8))) ?? [])
                let device = DeviceRecord(
                    kid: kid, user: "alice", name: "alice-laptop", publicKeyPEM: "-----BEGIN PUBLIC KEY-----\n",
                    status: .denied, createdAt: start + Int64(index / 100))
                if try storage.insertDevice(device) { count += 1 }
            }
            return count
        }
        #expect(try stored.map { try $0.get() }.reduce(0, +) == 2600)
        let first = try api.authorized("GET", "/v1/devices", token: token)
        #expect(first.status == 200)
        #expect(first.body.count < 64 * 1024)
        #expect(first.json?["devices"]?.arrayValue?.count == 100)
        var cursor = try #require(first.json?["next_cursor"]?.stringValue)
        var kids = (first.json?["devices"]?.arrayValue ?? []).compactMap { $0["kid"]?.stringValue }
        var pages = 1
        while true {
            let page = try api.transport.send(
                HTTPRequest(
                    method: "GET", path: "/v1/devices", query: ["cursor": cursor],
                    headers: ["Authorization": "Bearer \(token)"]))
            #expect(page.status == 200, "\(page.text)")
            kids += (page.json?["devices"]?.arrayValue ?? []).compactMap { $0["kid"]?.stringValue }
            pages += 1
            guard let next = page.json?["next_cursor"]?.stringValue else { break }
            cursor = next
            try #require(pages < 40)
        }
        #expect(pages == 27)
        #expect(kids.count == 2601)
        #expect(Set(kids).count == 2601)
        #expect(kids == (try runner.storage.devices(user: "alice")).map(\.kid))
    }

    @Test("another user's device gets exactly the answer of an unknown device (404), for approve and revoke")
    func otherUsersDeviceLooksUnknown() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer()
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let alice = try ServerTestKeys.key("alice-1")
        let alicePhone = try ServerTestKeys.key("alice-2")
        _ = try api.activeDevice(user: "alice", key: alice)
        #expect(try api.register(user: "alice", key: alicePhone).status == 202)
        let bobToken = try api.activeDevice(user: "bob", key: try ServerTestKeys.key("bob-1"))
        let unknown = try ServerTestKeys.key("stranger").publicKey.fingerprint
        for (method, suffix) in [("POST", "/approve"), ("DELETE", "")] {
            for target in [alice, alicePhone] {
                let foreign = try api.authorized(
                    method, "/v1/devices/\(target.publicKey.fingerprint)\(suffix)", token: bobToken)
                let missing = try api.authorized(method, "/v1/devices/\(unknown)\(suffix)", token: bobToken)
                #expect(foreign.status == 404, "\(method) \(foreign.text)")
                #expect(foreign.status == missing.status)
                #expect(foreign.errorCode == missing.errorCode)
                #expect(foreign.errorDescription == missing.errorDescription)
                #expect(foreign.body == missing.body)
            }
        }
        #expect(try runner.storage.device(kid: alice.publicKey.fingerprint)?.status == .active)
        #expect(try runner.storage.device(kid: alicePhone.publicKey.fingerprint)?.status == .pending)
    }
}
