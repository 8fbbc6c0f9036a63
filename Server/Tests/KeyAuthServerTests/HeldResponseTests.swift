import Dispatch
import Foundation
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

/// Responses held, with their connections suspended, while the writes they depend on wait for
/// the disk: seen over real sockets, with the SQLite log's fsync stalled by the test.
@Suite("Responses held until durable", .timeLimit(.minutes(10)))
struct HeldResponseTests {
    /// A server with 2 worker threads on storage whose fsync the test holds, and a socket API.
    private static func start(_ environment: TestEnvironment) throws -> (ServerRunner, TestAPI, StallableDisk) {
        let (storage, _, disk) = try environment.stallableStorage()
        let runner = try environment.startServer(storage: storage) {
            $0.threads = 2
            $0.failureLimit = 100_000
            // Logins that write: the replay cache in the database, durable before the answer.
            $0.replayCache = .database
        }
        return (runner, environment.socketAPI(runner), disk)
    }

    @Test("more logins than worker threads wait for the disk at once, none answered before it, all 200 after")
    func manyLoginsFewThreads() throws {
        let environment = TestEnvironment()
        let (runner, api, disk) = try Self.start(environment)
        defer { runner.stop() }
        let key = try ServerTestKeys.key("held-1")
        #expect(try api.register(user: "held", key: key).status == 201)
        let assertions = try (0..<12).map { _ in try api.assertion(key) }

        disk.hold()
        let logins = ConcurrentLogins(api, assertions)
        // With a worker blocked per login, 2 threads could take only 2 of the 12 at a time.
        #expect(eventually { runner.server.requestsInProgress == 12 }, "\(runner.server.requestsInProgress)")
        #expect(eventually { runner.server.heldResponses == 12 })
        // Nothing is answered while the claims are not durable.
        usleep(200_000)
        #expect(logins.statuses.isEmpty)

        disk.release()
        #expect(logins.waitForAll())
        #expect(logins.statuses == Dictionary(uniqueKeysWithValues: (0..<12).map { ($0, 200) }))
        #expect(eventually { runner.server.requestsInProgress == 0 && runner.server.heldResponses == 0 })
        // Durable: each jti is refused now, also by a second instance of the file.
        #expect(try api.login(assertion: assertions[0]).errorCode == "invalid_grant")
        let reopened = try SQLiteStorage(path: environment.databasePath)
        defer { reopened.close() }
        #expect(try !reopened.claimJTI(keyID: key.publicKey.fingerprint, jti: Self.jwtID(assertions[11]), expiresAt: 0))
    }

    @Test("a client that hangs up while its response is held costs nothing: the server keeps serving")
    func clientLeavesWhileHeld() throws {
        let environment = TestEnvironment()
        let (runner, api, disk) = try Self.start(environment)
        defer { runner.stop() }
        let key = try ServerTestKeys.key("held-2")
        #expect(try api.register(user: "leaver", key: key).status == 201)

        disk.hold()
        let form = Array(
            "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try api.assertion(key)))"
                .utf8)
        do {
            let connection = try RawHTTPConnection(port: runner.port)
            try connection.send(
                RawHTTPConnection.requestBytes(
                    method: "POST", path: "/oauth/token",
                    headers: [("Content-Type", "application/x-www-form-urlencoded")], body: form))
            #expect(eventually { runner.server.heldResponses == 1 })
            // The connection closes here, while its response is held.
        }
        disk.release()
        #expect(eventually { runner.server.requestsInProgress == 0 && runner.server.heldResponses == 0 })
        #expect(try api.login(key).status == 200)
        #expect(eventually { runner.server.requestsInProgress == 0 && runner.server.openConnections == 0 })
    }

    @Test("stopping waits for held responses: they go out once durable, then the server stops")
    func stopDrainsHeld() throws {
        let environment = TestEnvironment()
        let (runner, api, disk) = try Self.start(environment)
        let key = try ServerTestKeys.key("held-3")
        #expect(try api.register(user: "drained", key: key).status == 201)
        let assertions = try (0..<6).map { _ in try api.assertion(key) }

        disk.hold()
        let logins = ConcurrentLogins(api, assertions)
        #expect(eventually { runner.server.heldResponses == 6 })
        let stopped = DispatchSemaphore(value: 0)
        Thread {
            runner.stop()
            stopped.signal()
        }.start()
        #expect(eventually { !runner.server.isAcceptingConnections }, "still accepting")
        // A connection made while the held responses drain is closed without an answer.
        let late = try RawHTTPConnection(port: runner.port, timeoutSeconds: 5)
        try? late.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(late.isClosedUnanswered())
        #expect(stopped.wait(timeout: .now()) == .timedOut)

        disk.release()
        #expect(stopped.wait(timeout: .now() + 30) == .success)
        #expect(logins.waitForAll())
        #expect(logins.statuses == Dictionary(uniqueKeysWithValues: (0..<6).map { ($0, 200) }))
    }

    @Test("past the drain timeout, held responses become 503s and the daemon stops cleanly")
    func stopPastDrainTimeout() throws {
        let environment = TestEnvironment()
        let (disk, database) = try environment.stallableDatabase()
        defer { database.close() }
        var options = HTTPServerOptions(address: .loopback(port: 0))
        options.threadPoolSize = 1
        options.drainTimeoutSeconds = 1
        let server = try HTTPServer(responder: WritingResponder(database: database), options: options)

        disk.hold()
        // A batch stalled in its fsync; the request's write joins the next one.
        _ = try DurabilityScope.run { try database.write { _ in () } }
        #expect(disk.waitUntilStalled())
        let connection = try RawHTTPConnection(port: server.port)
        try connection.send(RawHTTPConnection.requestBytes(method: "POST", path: "/", headers: [], body: []))
        #expect(eventually { server.heldResponses == 1 })

        // libmicrohttpd aborts the process when stopped with a connection suspended.
        server.stop()
        let response = try connection.readResponse()
        #expect(response.status == 503)
        #expect(response.errorCode == "temporarily_unavailable")
        #expect(response.headers["x-failed-at"] == "/", "the application's answer to a stop")
        #expect(server.heldResponses == 0)
        disk.release()
    }

    @Test("during the drain every answer closes its connection, and a long poll is refused at once, not held")
    func drainClosesConnectionsAndRefusesWaits() throws {
        let environment = TestEnvironment()
        let (disk, database) = try environment.stallableDatabase()
        defer { database.close() }
        var options = HTTPServerOptions(address: .loopback(port: 0))
        // Longer than the connections' read timeout: a poll held to the drain's end fails the test.
        options.drainTimeoutSeconds = 60
        let server = try HTTPServer(responder: WaitingResponder(database: database), options: options)
        let stopped = DispatchSemaphore(value: 0)
        var stopping = false
        defer {
            // Whatever failed, the stop ends before the server goes: never a daemon stopped twice.
            disk.release()
            if stopping { _ = stopped.wait(timeout: .now() + 90) }
        }
        // Two keep-alive connections, each with one answer behind it.
        let plain = RawHTTPConnection.requestBytes(method: "GET", path: "/plain", headers: [])
        let keepers = try (0..<2).map { _ in try RawHTTPConnection(port: server.port, timeoutSeconds: 30) }
        for keeper in keepers {
            try keeper.send(plain)
            #expect(try keeper.readResponse().headers["connection"] == nil)
        }
        // A response held for the disk keeps the drain going.
        disk.hold()
        _ = try DurabilityScope.run { try database.write { _ in () } }
        #expect(disk.waitUntilStalled())
        let writer = try RawHTTPConnection(port: server.port, timeoutSeconds: 60)
        try writer.send(RawHTTPConnection.requestBytes(method: "POST", path: "/write", headers: [], body: []))
        #expect(eventually { server.heldResponses == 1 })
        stopping = true
        Thread {
            server.stop()
            stopped.signal()
        }.start()
        #expect(eventually { !server.isAcceptingConnections })

        try keepers[0].send(plain)
        let answered = try keepers[0].readResponse()
        #expect(answered.status == 200)
        #expect(answered.headers["connection"] == "close")
        #expect(keepers[0].isClosedByServer())
        try keepers[1].send(RawHTTPConnection.requestBytes(method: "GET", path: "/wait", headers: []))
        let refused = try keepers[1].readResponse()
        #expect(refused.status == 503)
        #expect(refused.headers["x-failed-at"] == "/wait", "the application's answer to a stop")
        #expect(server.heldResponses == 1, "only the write is held")
        #expect(stopped.wait(timeout: .now()) == .timedOut)

        disk.release()
        let stoppedInTime = stopped.wait(timeout: .now() + 30) == .success
        #expect(stoppedInTime)
        stopping = !stoppedInTime
        #expect(try writer.readResponse().status == 200)
    }

    /// The `jti` claim of a compact JWS.
    private static func jwtID(_ token: String) throws -> String {
        let payload = token.split(separator: ".")[1]
        guard let bytes = Base64URL.decode(String(payload)), let jti = try JSONValue(parsing: bytes)["jti"]?.stringValue
        else { throw TestFailure("no jti in \(token)") }
        return jti
    }
}

/// Logins of the given assertions, each on a thread and a connection of its own, started at once.
private final class ConcurrentLogins: Sendable {
    private let results = Mutex<[Int: Int]>([:])
    private let done = DispatchGroup()

    init(_ api: TestAPI, _ assertions: [String]) {
        for (index, assertion) in assertions.enumerated() {
            done.enter()
            Thread {
                let status = (try? api.login(assertion: assertion).status) ?? 0
                self.results.withLock { $0[index] = status }
                self.done.leave()
            }.start()
        }
    }

    /// The statuses answered so far, by index.
    var statuses: [Int: Int] { results.withLock { $0 } }

    /// Waits up to 30 s for every answer.
    func waitForAll() -> Bool {
        done.wait(timeout: .now() + 30) == .success
    }
}

/// `/write` answers 200 after one write, which a stalled disk keeps from being durable; `/wait`
/// waits for a deferred answer that never comes, as a long poll nothing wakes; anything else is
/// answered 200 at once.
private struct WaitingResponder: HTTPResponder {
    let database: SQLiteDatabase

    func respond(to request: HTTPRequest) -> HTTPResponse {
        switch request.path {
        case "/write": WritingResponder(database: database).respond(to: request)
        case "/wait": .deferred(DeferredResponse())
        default: .text("plain")
        }
    }

    func failure(_ error: any Error, at path: String) -> HTTPResponse {
        HTTPResponse.markedFailure(error, at: path)
    }
}

/// Answers every request with 200 after one write, which a stalled disk keeps from being
/// durable.
private struct WritingResponder: HTTPResponder {
    let database: SQLiteDatabase

    func respond(to request: HTTPRequest) -> HTTPResponse {
        do {
            try database.write { _ in () }
            return .text("written")
        } catch {
            return HTTPResponse(error: error)
        }
    }

    func failure(_ error: any Error, at path: String) -> HTTPResponse {
        HTTPResponse.markedFailure(error, at: path)
    }
}

extension HTTPResponse {
    /// The error's answer, marked with the path it answers: an answer the transport gets from
    /// the application (``HTTPResponder/failure(_:at:)``) rather than builds itself.
    fileprivate static func markedFailure(_ error: any Error, at path: String) -> HTTPResponse {
        var response = HTTPResponse(error: error)
        response.headers.set("X-Failed-At", path)
        return response
    }
}
