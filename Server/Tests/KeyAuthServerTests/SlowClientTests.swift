import Foundation
import Glibc
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

/// Slow-client attacks over real sockets: clients from one address that open many connections
/// and send their requests a line at a time must not stall clients from other addresses.
///
/// Loopback has a whole /8, so a test can be several clients: `127.0.0.77` is the attacker,
/// `127.0.0.1` everyone else.
@Suite("Slow and greedy clients", .timeLimit(.minutes(10)))
struct SlowClientTests {
    static let attacker = "127.0.0.77"

    @Test("hundreds of trickling connections from one address leave a client from another its answers")
    func tricklingFloodFromOneAddress() throws {
        let environment = TestEnvironment()
        // A total limit the flood could exhaust on its own, as 1000 connections exhaust the
        // default one.
        let runner = try environment.startServer { $0.connectionLimit = 200 }
        defer { runner.stop() }
        var attackers: [RawHTTPConnection] = []
        for _ in 0..<300 {
            guard let connection = try? RawHTTPConnection(port: runner.port, sourceAddress: Self.attacker) else {
                continue
            }
            try? connection.send("POST /oauth/token HTTP/1.1\r\nHost: x\r\n")
            attackers.append(connection)
        }
        #expect(attackers.count > 200, "the kernel should accept the connections into its backlog")
        // One more header line on every connection each second, so that none of them is ever idle.
        let trickle = Trickle(attackers)
        defer { trickle.stop() }

        var statuses: [Int] = []
        for _ in 0..<5 {
            let response = try? SocketTransport(port: runner.port).send(HTTPRequest(method: "GET", path: "/healthz"))
            statuses.append(response?.status ?? 0)
            usleep(500_000)
        }
        #expect(statuses == [200, 200, 200, 200, 200])
        #expect(runner.server.openConnections <= HTTPServerOptions.defaultConnectionsPerAddressLimit + 1)
    }

    @Test("connections from one address beyond --max-connections-per-address are refused, others are not")
    func perAddressLimit() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.connectionsPerAddressLimit = 3 }
        defer { runner.stop() }
        let held = try (0..<3).map { _ in try RawHTTPConnection(port: runner.port, sourceAddress: Self.attacker) }
        let deadline = ServerClock.monotonicNanoseconds() + 5_000_000_000
        while runner.server.openConnections < 3, ServerClock.monotonicNanoseconds() < deadline { usleep(10_000) }
        #expect(runner.server.openConnections == 3)

        let refused = try RawHTTPConnection(port: runner.port, sourceAddress: Self.attacker)
        #expect(refused.isClosedByServer(waitingMilliseconds: 5000))
        #expect(try SocketTransport(port: runner.port).send(HTTPRequest(method: "GET", path: "/healthz")).status == 200)
        for connection in held {
            try connection.send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz"))
            #expect(try connection.readResponse().status == 200)
        }
    }

    @Test("a connection that keeps trickling header lines is closed at the request deadline")
    func requestDeadline() throws {
        let environment = TestEnvironment()
        // The idle timeout alone would never close it: a byte arrives every half second.
        let runner = try Self.startWithTwoSecondDeadline(environment)
        defer { runner.stop() }
        let connection = try RawHTTPConnection(port: runner.port)
        try connection.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
        var linesSent = 0
        var closed = false
        // Up to 20 s of trickling: ten times the deadline.
        while linesSent < 40, !closed {
            do {
                try connection.send("X-Slow: \(linesSent)\r\n")
                linesSent += 1
                closed = connection.isClosedByServer(waitingMilliseconds: 500)
            } catch {
                closed = true
            }
        }
        #expect(closed, "still open after \(linesSent) header lines")
        #expect(linesSent >= 2, "closed before the deadline")
        #expect(try SocketTransport(port: runner.port).send(HTTPRequest(method: "GET", path: "/healthz")).status == 200)
    }

    @Test("the deadline counts per request: a keep-alive connection answering promptly stays open past it")
    func deadlinePerRequest() throws {
        let environment = TestEnvironment()
        let runner = try Self.startWithTwoSecondDeadline(environment)
        defer { runner.stop() }
        let connection = try RawHTTPConnection(port: runner.port)
        for _ in 0..<4 {
            try connection.send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz"))
            #expect(try connection.readResponse().status == 200)
            usleep(1_200_000)
        }
        // Nearly 5 s on one connection, more than twice the deadline, and no request was late.
        try connection.send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz"))
        #expect(try connection.readResponse().status == 200)
    }

    @Test("a client taking a large answer a few bytes at a time is shut down at the deadline, and its slot comes back")
    func slowReader() throws {
        var options = HTTPServerOptions(address: .loopback(port: 0))
        options.requestTimeoutSeconds = 2
        // libmicrohttpd's idle timeout restarts at every byte sent: it never closes a slow reader.
        options.connectionTimeoutSeconds = 600
        options.connectionsPerAddressLimit = 1
        // A second for the 16 MiB on top of the timeout (the default rate would allow 17 min).
        options.slowestReadingBytesPerSecond = LargeAnswer.size
        let server = try HTTPServer(responder: LargeAnswer(), options: options)
        defer { server.stop() }
        let reader = try RawHTTPConnection(port: server.port, sourceAddress: Self.attacker, receiveBufferBytes: 4096)
        try reader.send(RawHTTPConnection.requestBytes(method: "GET", path: "/large"))
        var received = 0
        var closed = false
        // Up to 20 s of reading 4 KiB every quarter second, ten times the deadline: 320 KiB of
        // the 16 MiB, which no socket buffer holds.
        for _ in 0..<80 where !closed {
            guard let count = reader.receiveSome(upTo: 4096, waitingMilliseconds: 250) else {
                closed = true
                break
            }
            received += count
            usleep(250_000)
        }
        #expect(closed, "still open after \(received) bytes")
        #expect(received > 0 && received < LargeAnswer.size)
        #expect(eventually { server.openConnections == 0 })
        #expect(server.connectionFigures.shutDownResponseUntaken == 1)
        // The address's one slot is free again.
        let next = try RawHTTPConnection(port: server.port, sourceAddress: Self.attacker)
        try next.send(RawHTTPConnection.requestBytes(method: "GET", path: "/small"))
        let answer = try next.readResponse()
        #expect(answer.status == 200)
        #expect(answer.body == Array("small".utf8))
    }

    @Test("a response's deadline starts after the time its size needs at the slowest reading rate")
    func responseAllowance() throws {
        // The default rate, 16 KiB/s: 160 KiB are allowed 10 s before the 10 s timeout counts.
        let registry = RequestDeadlines(timeoutSeconds: 10, shares: ConnectionShares(limit: 100, perAddressLimit: 0))
        defer { registry.cancel() }
        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { for descriptor in pair { close(descriptor) } }
        let connection = registry.connectionStarted(descriptor: pair[0], clientAddress: "", peer: nil)
        defer { registry.connectionClosed(connection) }
        let now = ServerClock.monotonicNanoseconds()
        #expect(connection.requestReceived())
        registry.responseQueued(on: connection, bytes: 160 * 1024, now: now)
        #expect(connection.owesRequestSince == nil)
        #expect(registry.sweep(now: now + 19_000_000_000) == 0)
        #expect(registry.sweep(now: now + 21_000_000_000) == 1)
        #expect(registry.figures.shutDownResponseUntaken == 1)
        // Shut down: the response's end does not bring it back.
        connection.requestEnded(now: now + 22_000_000_000)
        #expect(connection.owesRequestSince == nil && connection.sendingSince == nil)

        // A size past any allowance is capped at 2 minutes, and stays a response being sent.
        let large = registry.connectionStarted(descriptor: pair[1], clientAddress: "", peer: nil)
        defer { registry.connectionClosed(large) }
        #expect(large.requestReceived())
        registry.responseQueued(on: large, bytes: .max, now: now)
        #expect(large.sendingSince == now + RequestDeadlines.longestSizeAllowanceNanoseconds)
        #expect(registry.sweep(now: now + 129_000_000_000) == 0)
        #expect(registry.sweep(now: now + 131_000_000_000) == 1)
    }

    /// A server whose request deadline is 2 s and whose idle timeout is too long to matter.
    static func startWithTwoSecondDeadline(_ environment: TestEnvironment) throws -> ServerRunner {
        try environment.startServer {
            $0.requestTimeoutSeconds = 2
            $0.connectionTimeoutSeconds = 600
        }
    }

    @Test("flags: 32 connections per address by default, none with --trust-proxy; 10 s request and idle timeouts")
    func flags() throws {
        let defaults = try serveConfiguration([])
        #expect(defaults.connectionsPerAddressLimit == 32)
        #expect(defaults.requestTimeoutSeconds == 10)
        #expect(defaults.connectionTimeoutSeconds == 10)
        #expect(try serveConfiguration(["--trust-proxy"]).connectionsPerAddressLimit == 0)
        #expect(
            try serveConfiguration(["--trust-proxy", "--max-connections-per-address", "500"]).connectionsPerAddressLimit
                == 500)
        let fromEnvironment = try serveConfiguration(
            [],
            [
                "KEYAUTH_SERVER_MAX_CONNECTIONS_PER_ADDRESS": "0", "KEYAUTH_SERVER_REQUEST_TIMEOUT": "30",
                "KEYAUTH_SERVER_CONNECTION_TIMEOUT": "5",
            ])
        #expect(fromEnvironment.connectionsPerAddressLimit == 0)
        #expect(fromEnvironment.requestTimeoutSeconds == 30)
        #expect(fromEnvironment.connectionTimeoutSeconds == 5)
        for bad in [["--max-connections-per-address", "-1"], ["--request-timeout", "0"], ["--request-timeout", "x"]] {
            #expect(throws: ServerConfigurationError.self) { _ = try serveConfiguration(bad) }
        }
    }
}

/// 16 MiB for every request but `/small`: more than the kernel's socket buffers hold, so a
/// client that reads slowly keeps the response in libmicrohttpd's hands.
private struct LargeAnswer: HTTPResponder {
    static let size = 16 << 20

    func respond(to request: HTTPRequest) -> HTTPResponse {
        if request.path == "/small" { return HTTPResponse(status: 200, body: Array("small".utf8)) }
        return HTTPResponse(status: 200, body: [UInt8](repeating: 0x61, count: Self.size))
    }
}

/// Sends one header line on each of a set of connections every second, on a thread of its own,
/// until stopped: slow clients that are never idle.
private final class Trickle: @unchecked Sendable {
    // The connections are used only by the thread; `stopped` is the only shared state.
    private let connections: [RawHTTPConnection]
    private let stopped = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init(_ connections: [RawHTTPConnection]) {
        self.connections = connections
        Thread { [self] in
            let connections = self.connections
            var line = 0
            while !stopped.load(ordering: .relaxed) {
                for connection in connections { try? connection.send("X-Slow-\(line): 1\r\n") }
                line += 1
                for _ in 0..<10 where !stopped.load(ordering: .relaxed) { usleep(100_000) }
            }
            finished.signal()
        }.start()
    }

    /// Stops the thread and waits for it: at most a send timeout per connection, so a minute
    /// is plenty; past it, the test goes on and the thread ends on its own.
    func stop() {
        stopped.store(true, ordering: .relaxed)
        if finished.wait(timeout: .now() + 60) == .timedOut { Issue.record("the trickling thread did not stop") }
    }
}
