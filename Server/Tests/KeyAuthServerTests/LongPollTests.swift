import Dispatch
import Foundation
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

/// Long polls of `GET /v1/auth-requests?wait=` over real sockets: a waiting poll holds no worker
/// thread, so the keep-alive connections that share a worker with it are still read and answered.
@Suite("Long polls hold no worker thread", .timeLimit(.minutes(10)))
struct LongPollTests {
    private static func login(_ api: TestAPI, key: RSAPrivateKey) throws -> [UInt8] {
        let form =
            "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try api.assertion(key)))"
        return RawHTTPConnection.requestBytes(
            method: "POST", path: "/oauth/token",
            headers: [("Content-Type", "application/x-www-form-urlencoded")], body: Array(form.utf8))
    }

    @Test(
        "50 long polls wait on the default worker threads while 8 keep-alive clients log in, each answered long before the polls' 30 s"
    )
    func pollsDoNotStallKeepAliveClients() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer {
            $0.threads = nil
            $0.failureLimit = 100_000
            // One user's 50 polls, as 50 users' would wait (each user's share is 8 by default).
            $0.maximumLongPollsPerUser = 50
        }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let key = try ServerTestKeys.key("long-poll")
        let token = try api.activeDevice(user: "watcher", key: key)
        let client = try api.addClient()
        let cursor = try #require(try api.openRequests(token: token).json?["cursor"]?.stringValue)

        // Keep-alive clients first, each with one answered login, so libmicrohttpd has handed
        // their connections to its workers before the polls arrive.
        let clients = try (0..<8).map { index in
            try RawHTTPConnection(port: runner.port, timeoutSeconds: 30, sourceAddress: "127.0.0.\(20 + index)")
        }
        for connection in clients {
            try connection.send(try Self.login(api, key: key))
            #expect(try connection.readResponse().status == 200)
        }

        // 50 polls from 5 addresses (the per-address connection limit is 32).
        let polls = try (0..<50).map { index in
            try RawHTTPConnection(port: runner.port, timeoutSeconds: 30, sourceAddress: "127.0.0.\(10 + index % 5)")
        }
        let request = RawHTTPConnection.requestBytes(
            method: "GET", path: "/v1/auth-requests?wait=30&after=\(cursor)",
            headers: [("Authorization", "Bearer \(token)")])
        for poll in polls { try poll.send(request) }
        #expect(eventually { runner.responder.service.signIn.watchers.waiting == 50 })

        // Every keep-alive client logs in again while the polls wait.
        let durations = Mutex<[Int: Double]>([:])
        let statuses = Mutex<[Int: Int]>([:])
        let group = DispatchGroup()
        let logins = try clients.map { _ in try Self.login(api, key: key) }
        for (index, connection) in clients.enumerated() {
            nonisolated(unsafe) let connection = connection
            let login = logins[index]
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                let start = ServerClock.monotonicNanoseconds()
                let status = (try? connection.send(login)).flatMap { try? connection.readResponse().status } ?? 0
                let seconds = Double(ServerClock.monotonicNanoseconds() - start) / 1e9
                durations.withLock { $0[index] = seconds }
                statuses.withLock { $0[index] = status }
            }
        }
        #expect(group.wait(timeout: .now() + 40) == .success)
        #expect(statuses.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<8).map { ($0, 200) }))
        let slowest = durations.withLock { $0.values.max() } ?? .infinity
        // A login held behind the polls would wait for their 30 s; 10 s leaves a loaded machine room.
        #expect(slowest < 10, "the slowest keep-alive login took \(slowest) s while the polls waited")
        #expect(runner.responder.service.signIn.watchers.waiting == 50)

        // A sign-in request made now wakes every poll, with the request listed.
        let id = try api.startSignIn(client, user: "watcher")
        for poll in polls {
            let answer = try poll.readResponse()
            #expect(answer.status == 200)
            #expect(answer.json?["requests"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [id])
        }
        #expect(eventually { runner.responder.service.signIn.watchers.waiting == 0 })
        #expect(eventually { runner.server.heldResponses == 0 })
    }

    @Test(
        "a request made here wakes its user's waiting poll once its write is durable, without the periodic check"
    )
    func requestWakesPollOnceDurable() throws {
        // No periodic check while the test runs: only the request's own wake-up answers the poll.
        let poll = try WaitingPoll(TestEnvironment(), checkInterval: .seconds(3600))
        defer { poll.storage.close() }
        let (database, signIn, answered) = (poll.database, poll.signIn, poll.answered)

        // The request's write joins a batch that cannot commit yet, the one before it being
        // stalled in its fsync: a check made when the request was written would read nothing.
        database.disk.hold()
        defer { database.disk.release() }
        _ = try DurabilityScope.run { try database.sqlite.write { _ in () } }
        try #require(database.disk.waitUntilStalled(), "the group commit did not reach the fsync")
        let (request, scope) = try DurabilityScope.run {
            try signIn.start(
                kind: .account, clientID: nil, user: "alice", bindingMessage: nil, scope: nil, requestedExpiry: nil,
                from: nil)
        }
        guard case .pending = scope.outcome else {
            Issue.record("the request's batch was durable while the disk was held")
            return
        }
        database.disk.release()
        #expect(answered.wait(timeout: .now() + 20) == .success, "the waiting poll was not woken")
        #expect(poll.listed.withLock { $0 } == [request.id])
    }

    @Test("a poll's periodic check that reads a request not yet durable answers only once it is")
    func checkWaitsForDurability() throws {
        let poll = try WaitingPoll(TestEnvironment(), checkInterval: .milliseconds(50))
        defer { poll.storage.close() }
        let (database, signIn, answered) = (poll.database, poll.signIn, poll.answered)
        // The request's batch commits and stalls in its fsync: readers see the row, and a crash
        // now would take it back.
        database.disk.hold()
        defer { database.disk.release() }
        let (request, scope) = try DurabilityScope.run {
            try signIn.start(
                kind: .account, clientID: nil, user: "alice", bindingMessage: nil, scope: nil, requestedExpiry: nil,
                from: nil)
        }
        try #require(database.disk.waitUntilStalled(), "the group commit did not reach the fsync")
        // Some twenty periodic checks read the row meanwhile.
        #expect(answered.wait(timeout: .now() + 1) == .timedOut, "the poll was answered before the request was durable")
        guard case .pending = scope.outcome else {
            Issue.record("the request's batch was durable while the disk was held")
            return
        }
        database.disk.release()
        #expect(answered.wait(timeout: .now() + 20) == .success, "the poll was not answered once it was durable")
        #expect(poll.listed.withLock { $0 } == [request.id])
    }

    @Test(
        "a poll that nothing wakes is answered at its deadline with the list as it is, and stopping answers waiting polls"
    )
    func deadlineAndStop() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.failureLimit = 100_000 }
        let api = environment.socketAPI(runner)
        let token = try api.activeDevice(user: "quiet", key: try ServerTestKeys.key("long-poll-2"))
        let cursor = try #require(try api.openRequests(token: token).json?["cursor"]?.stringValue)
        let request = RawHTTPConnection.requestBytes(
            method: "GET", path: "/v1/auth-requests?wait=2&after=\(cursor)",
            headers: [("Authorization", "Bearer \(token)")])

        let poll = try RawHTTPConnection(port: runner.port, timeoutSeconds: 30)
        let start = ServerClock.monotonicNanoseconds()
        try poll.send(request)
        let answer = try poll.readResponse()
        let waited = Double(ServerClock.monotonicNanoseconds() - start) / 1e9
        #expect(answer.status == 200)
        #expect(answer.json?["requests"] == .array([]))
        #expect(answer.json?["cursor"]?.stringValue == cursor)
        #expect(waited >= 1.5, "answered after \(waited) s, before its deadline")

        // A stop while a poll waits answers it (503) instead of leaving the connection suspended.
        let late = try RawHTTPConnection(port: runner.port, timeoutSeconds: 30)
        try late.send(
            RawHTTPConnection.requestBytes(
                method: "GET", path: "/v1/auth-requests?wait=30&after=\(cursor)",
                headers: [("Authorization", "Bearer \(token)")]))
        #expect(eventually { runner.responder.service.signIn.watchers.waiting == 1 })
        runner.stop()
        #expect(try late.readResponse().status == 503)
    }

    @Test("a device revoked while its poll waits is answered 401, not with its user's requests")
    func revokedWhileWaiting() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.failureLimit = 100_000 }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let key = try ServerTestKeys.key("long-poll-3")
        let token = try api.activeDevice(user: "leaving", key: key)
        let cursor = try #require(try api.openRequests(token: token).json?["cursor"]?.stringValue)
        let poll = try RawHTTPConnection(port: runner.port, timeoutSeconds: 30)
        try poll.send(
            RawHTTPConnection.requestBytes(
                method: "GET", path: "/v1/auth-requests?wait=15&after=\(cursor)",
                headers: [("Authorization", "Bearer \(token)")]))
        #expect(eventually { runner.responder.service.signIn.watchers.waiting == 1 })
        let kid = key.publicKey.fingerprint
        #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: token).status == 204)
        let answer = try poll.readResponse()
        #expect(answer.status == 401, "answered \(answer.status)")
        #expect(answer.json?["requests"] == nil)
    }

    @Test("one user's long polls take no more than their share of the waiting places")
    func shareOfPlacesPerUser() {
        let watchers = SignInRequestWatchers(
            maximumWaiters: 10, maximumWaitersPerUser: 2, checkInterval: .seconds(3600))
        let answers = Mutex(0)
        func wait(_ user: String) -> Bool {
            watchers.wait(
                user: user, seconds: 600, load: { [] }, isNew: { _ in false },
                answer: { _ in answers.withLock { $0 += 1 } })
        }
        #expect(wait("mallory") && wait("mallory"))
        #expect(!wait("mallory"), "a third poll of one user waited")
        #expect(wait("alice"), "another user's poll found no place")
        #expect(watchers.waiting == 3)
        #expect(answers.withLock { $0 } == 0)
    }
}

/// Alice's active laptop, and a long poll of hers waiting, on SQLite storage whose disk the test
/// can stall; what the poll lists once answered is in ``listed``.
private final class WaitingPoll: Sendable {
    /// Kept for as long as the poll: its files go with it.
    let environment: TestEnvironment
    let database: QueueWatchingDatabase
    let storage: SQLStorage
    let signIn: SignInRequests
    let answered = DispatchSemaphore(value: 0)
    let listed = Mutex<[String]?>(nil)

    /// - Parameter checkInterval: how often the watchers check the poll on their own.
    init(_ environment: TestEnvironment, checkInterval: DispatchTimeInterval) throws {
        self.environment = environment
        database = try QueueWatchingDatabase(path: environment.databasePath)
        storage = try SQLStorage(database: database, location: environment.databasePath, now: { 1_000 })
        let laptop = DeviceRecord(
            kid: "k1", user: "alice", name: "laptop", publicKeyPEM: "pem", status: .active, createdAt: 1)
        #expect(try storage.insertDevice(laptop))
        signIn = SignInRequests(
            storage: storage, settings: .init(),
            watchers: SignInRequestWatchers(maximumWaiters: 1, checkInterval: checkInterval), now: { 1_000 })
        let watch = try signIn.open(for: "alice", after: .start, waiting: 600) { [weak self] result in
            self?.listed.withLock { $0 = (try? result.get())?.map(\.id) }
            self?.answered.signal()
        }
        guard case .later = watch else { throw StorageError(.queryFailed, "the poll did not wait") }
    }
}
