import Foundation
import Glibc
import KeyAuth
import Synchronization
import Testing

@testable import KeyAuthServer

/// A fair share of the connection slots under pressure, over real sockets: addresses that hold
/// many connections give back the silent ones when the slots run short, so that a few dozen
/// addresses cannot keep every other client waiting for the request deadline.
///
/// Each server has 40 slots (under pressure from 30) and 16 per address (a fair share of 2).
/// Loopback has a whole /8, so `127.0.0.x` are as many clients as a test needs.
@Suite("A fair share of connections under pressure", .serialized, .timeLimit(.minutes(10)))
struct FairShareTests {
    /// A server with 40 slots and `perAddress` connections per address; a request deadline and
    /// an idle timeout of `timeoutSeconds`.
    static func startServer(
        _ environment: TestEnvironment, perAddress: Int = 16, timeoutSeconds: Int = 60
    ) throws -> ServerRunner {
        try environment.startServer {
            $0.connectionLimit = 40
            $0.connectionsPerAddressLimit = perAddress
            $0.requestTimeoutSeconds = timeoutSeconds
            $0.connectionTimeoutSeconds = timeoutSeconds
        }
    }

    /// `count` connections from `address` that send `partialHead` (or nothing) and then nothing.
    static func silentConnections(
        _ count: Int, from address: String, to runner: ServerRunner, partialHead: String? = nil
    ) throws -> [RawHTTPConnection] {
        try (0..<count).map { _ in
            let connection = try RawHTTPConnection(port: runner.port, sourceAddress: address)
            if let partialHead { try connection.send(partialHead) }
            return connection
        }
    }

    /// Waits up to 10 s for the server to count `count` open connections; whether it did.
    static func waitForOpenConnections(_ count: Int, on runner: ServerRunner) -> Bool {
        eventually(within: 10) { runner.server.openConnections == count }
    }

    /// The status of a login with `key` on a new connection, which waits up to 8 s for its answer
    /// (below the 10 s request deadline that frees slots anyway).
    static func loginStatus(_ key: RSAPrivateKey, on runner: ServerRunner, _ environment: TestEnvironment) throws -> Int
    {
        let api = TestAPI(
            transport: SocketTransport(port: runner.port, timeoutSeconds: 8), issuer: runner.issuer,
            clock: environment.clock, storage: runner.storage)
        return try api.login(key).status
    }

    /// Sends `GET /healthz` on each connection and returns the statuses (0 for no answer).
    static func healthStatuses(_ connections: [RawHTTPConnection]) -> [Int] {
        connections.map { connection in
            (try? connection.send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz")))
                .flatMap { try? connection.readResponse().status } ?? 0
        }
    }

    @Test("addresses that fill every slot with silent connections leave a client of another address its login")
    func silentConnectionsFillEverySlot() throws {
        let environment = TestEnvironment()
        // The default 10 s request deadline, which alone would free the slots after 10 s.
        let runner = try Self.startServer(environment, timeoutSeconds: HTTPServerOptions.defaultRequestTimeoutSeconds)
        defer { runner.stop() }
        let key = try ServerTestKeys.key("alice-1")
        #expect(try environment.socketAPI(runner).register(user: "alice", key: key).status == 201)

        // Below pressure two addresses take 12 slots each, with a request line they never end;
        // then eight more addresses take their fair share of 2 each, and every slot is taken.
        let greedy = try (0..<2).flatMap { index in
            try Self.silentConnections(
                12, from: "127.0.0.\(100 + index)", to: runner, partialHead: "POST /oauth/token HTTP/1.1\r\n")
        }
        #expect(Self.waitForOpenConnections(24, on: runner))
        let modest = try (0..<8).flatMap { index in
            try Self.silentConnections(2, from: "127.0.0.\(110 + index)", to: runner)
        }
        #expect(Self.waitForOpenConnections(40, on: runner), "the connections should take every slot")

        // The login waits in the listening socket's queue for a slot; 8 s bounds the wait below
        // the 10 s deadline that would free the slots anyway.
        #expect(try Self.loginStatus(key, on: runner, environment) == 200)
        withExtendedLifetime((greedy, modest)) {}
    }

    @Test("under pressure an address at its fair share is refused one more; below pressure it gets the whole limit")
    func fairShareUnderPressure() throws {
        let environment = TestEnvironment()
        let runner = try Self.startServer(environment)
        defer { runner.stop() }

        // Below pressure: one address holds all 16 connections its limit allows, each served.
        var whole = try Self.silentConnections(16, from: "127.0.0.100", to: runner)
        #expect(Self.waitForOpenConnections(16, on: runner))
        #expect(Self.healthStatuses(whole) == Array(repeating: 200, count: 16))
        whole = []
        #expect(Self.waitForOpenConnections(0, on: runner))

        // Fifteen addresses at their fair share of 2 bring the server to 30 of 40: pressure.
        let pressing = try (0..<15).flatMap { index in
            try Self.silentConnections(2, from: "127.0.0.\(110 + index)", to: runner)
        }
        #expect(Self.waitForOpenConnections(30, on: runner))
        // Connections at their share are served.
        #expect(Self.healthStatuses(pressing) == Array(repeating: 200, count: 30))
        let third = try RawHTTPConnection(port: runner.port, sourceAddress: "127.0.0.110")
        #expect(third.isClosedByServer(waitingMilliseconds: 5000), "a third connection of an address at its share")
        // An address below its share still gets in.
        let newcomer = try RawHTTPConnection(port: runner.port, sourceAddress: "127.0.0.200")
        #expect(Self.healthStatuses([newcomer]) == [200])
    }

    @Test("addresses that each hold the whole fair share leave a newcomer a slot: the share shrinks among many")
    func sharesShrinkAmongManyAddresses() throws {
        let environment = TestEnvironment()
        // A fair share of 4 (32 per address); 10 addresses at 4 each would take all 40 slots.
        let runner = try Self.startServer(environment, perAddress: 32)
        defer { runner.stop() }
        let key = try ServerTestKeys.key("alice-1")
        #expect(try environment.socketAPI(runner).register(user: "alice", key: key).status == 201)

        // From 30 open connections on, 10 addresses share 30 slots: 3 each, and a fourth is refused.
        var flood: [RawHTTPConnection] = []
        for index in 0..<10 {
            flood += try Self.silentConnections(4, from: "127.0.0.\(100 + index)", to: runner)
            usleep(50_000)
        }
        usleep(300_000)
        #expect(runner.server.openConnections < 40, "the shares should leave slots free")

        // The login finds a slot at once; before, it waited for the 60 s deadline (8 s here).
        #expect(try Self.loginStatus(key, on: runner, environment) == 200)
        withExtendedLifetime(flood) {}
    }

    @Test("at the limit a newcomer takes the slot of an idle keep-alive connection of the greediest address")
    func newcomerMakesRoomAtTheLimit() throws {
        let environment = TestEnvironment()
        // A fair share of 4 (32 per address), and a 60 s request deadline that frees nothing here.
        let runner = try Self.startServer(environment, perAddress: 32)
        defer { runner.stop() }
        let key = try ServerTestKeys.key("alice-1")
        #expect(try environment.socketAPI(runner).register(user: "alice", key: key).status == 201)

        // Below pressure one address opens 28 keep-alive connections, each sending a request every
        // 0.5 s: none owes one for the 2 s after which the sweep takes a slot back.
        let greedy = try (0..<28).map { _ in try RawHTTPConnection(port: runner.port, sourceAddress: "127.0.0.100") }
        let load = KeepAliveLoad(greedy, pauseMicroseconds: 500_000)
        #expect(Self.waitForOpenConnections(28, on: runner))
        // Twelve addresses with one silent connection each take the other slots: all 40.
        let modest = try (0..<12).flatMap { index in
            try Self.silentConnections(1, from: "127.0.0.\(110 + index)", to: runner)
        }
        #expect(Self.waitForOpenConnections(40, on: runner), "the connections should take every slot")

        // The login gets a slot at once; before, it waited in the listening socket's queue for
        // as long as the greedy connections kept busy (8 s here).
        #expect(try Self.loginStatus(key, on: runner, environment) == 200)
        let (answered, failed) = load.stop()
        #expect(answered > 0)
        #expect(failed > 0, "a connection of the greedy address should have made room")
        #expect(runner.server.connectionFigures.shutDownToMakeRoom > 0)
        #expect(
            runner.responder.metrics.render().contains("keyauth_connections_shut_down_total{reason=\"make_room\"} "))
        // The addresses holding one connection each kept theirs.
        #expect(Self.healthStatuses(modest) == Array(repeating: 200, count: 12))
    }

    @Test("under pressure an address's busy keep-alive connections go on while its silent ones are closed")
    func busyConnectionsKeepGoing() throws {
        let environment = TestEnvironment()
        let runner = try Self.startServer(environment)
        defer { runner.stop() }

        // One address: 8 connections sending requests back to back, and 4 that send nothing.
        let busy = try (0..<8).map { _ in try RawHTTPConnection(port: runner.port, sourceAddress: "127.0.0.100") }
        let load = KeepAliveLoad(busy)
        let silent = try Self.silentConnections(4, from: "127.0.0.100", to: runner)
        #expect(Self.waitForOpenConnections(12, on: runner))

        // Eleven addresses at their fair share of 2 bring the server to 34 of 40: pressure, which
        // stays once the silent 4 are gone.
        let pressing = try (0..<11).flatMap { index in
            try Self.silentConnections(2, from: "127.0.0.\(110 + index)", to: runner)
        }
        // 20 s: well within the 60 s request deadline, so only the pressure closes them.
        for connection in silent {
            #expect(connection.isClosedByServer(waitingMilliseconds: 20_000), "a silent connection stayed open")
        }
        // Three more sweeps under pressure with the load going.
        usleep(3_000_000)
        let (answered, failed) = load.stop()
        #expect(failed == 0)
        #expect(answered > 0)
        #expect(runner.server.openConnections == 30)
        // The connections at their fair share were not touched.
        #expect(Self.healthStatuses(pressing) == Array(repeating: 200, count: 22))
    }

    @Test("under pressure a busy keep-alive connection older than the request timeout is answered, then closed")
    func oldBusyConnectionsCloseAfterTheirAnswer() throws {
        let environment = TestEnvironment()
        // 8 slots, under pressure from 6; no per-address limit, so no fair share: age alone. A
        // 2 s request deadline, and requests every 0.2 s so that none is ever past it.
        let runner = try environment.startServer {
            $0.connectionLimit = 8
            $0.connectionsPerAddressLimit = 0
            $0.requestTimeoutSeconds = 2
            $0.connectionTimeoutSeconds = 60
        }
        defer { runner.stop() }
        var live = try (0..<6).map { _ in try RawHTTPConnection(port: runner.port) }
        #expect(Self.waitForOpenConnections(6, on: runner))
        // Each of the first six, once closed; a closed one is replaced at once by a new (young)
        // connection, so that the pressure lasts until the sweep has seen every first one.
        var closedFirst: [RawHTTPConnection?] = Array(repeating: nil, count: live.count)
        var isFirst = Array(repeating: true, count: live.count)
        let deadline = ServerClock.monotonicNanoseconds() + 8_000_000_000
        while closedFirst.contains(where: { $0 == nil }), ServerClock.monotonicNanoseconds() < deadline {
            for index in live.indices {
                try live[index].send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz"))
                let response = try live[index].readResponse()
                #expect(response.status == 200)
                guard response.headers["connection"]?.lowercased() == "close" else { continue }
                if isFirst[index] { closedFirst[index] = live[index] }
                isFirst[index] = false
                live[index] = try RawHTTPConnection(port: runner.port)
            }
            usleep(200_000)
        }
        // Each got its answer with `Connection: close` once older than 2 s (a sweep under
        // pressure), and the server then closed it.
        #expect(closedFirst.allSatisfy { $0 != nil })
        for connection in closedFirst.compactMap({ $0 }) {
            #expect(connection.isClosedByServer(waitingMilliseconds: 5000))
        }
    }

    @Test("with no per-address limit (behind a trusted proxy) one address may take every slot, under pressure too")
    func noFairShareWithoutPerAddressLimit() throws {
        let environment = TestEnvironment()
        let runner = try Self.startServer(environment, perAddress: 0)
        defer { runner.stop() }

        let proxied = try Self.silentConnections(40, from: "127.0.0.100", to: runner)
        #expect(Self.waitForOpenConnections(40, on: runner))
        // Longer than the 2 s after which a silent connection past a fair share gives its slot
        // back, and a sweep more: none is closed.
        usleep(4_000_000)
        #expect(runner.server.openConnections == 40)
        #expect(Self.healthStatuses(proxied) == Array(repeating: 200, count: 40))
    }
}

/// Sends `GET /healthz` on each of a set of keep-alive connections in turn, reading each answer,
/// on a thread of its own until stopped: busy clients.
private final class KeepAliveLoad: @unchecked Sendable {
    // The connections are used only by the thread until it finishes; the counts are atomic.
    private let connections: [RawHTTPConnection]
    private let running = Atomic<Bool>(true)
    private let answered = Atomic<Int>(0)
    private let failed = Atomic<Int>(0)
    private let done = DispatchSemaphore(value: 0)

    /// Starts the thread: `pauseMicroseconds` after each round of requests (none by default).
    init(_ connections: [RawHTTPConnection], pauseMicroseconds: UInt32 = 0) {
        self.connections = connections
        Thread { [self] in
            let request = RawHTTPConnection.requestBytes(method: "GET", path: "/healthz")
            while running.load(ordering: .relaxed) {
                if pauseMicroseconds > 0 { usleep(pauseMicroseconds) }
                for connection in self.connections {
                    let status = (try? connection.send(request)).flatMap { try? connection.readResponse().status }
                    if status == 200 {
                        answered.add(1, ordering: .relaxed)
                    } else {
                        failed.add(1, ordering: .relaxed)
                    }
                }
            }
            done.signal()
        }.start()
    }

    /// Stops the thread, waiting up to a minute (a receive timeout per connection at most), and
    /// returns the requests answered 200 and the others.
    func stop() -> (answered: Int, failed: Int) {
        running.store(false, ordering: .relaxed)
        if done.wait(timeout: .now() + 60) == .timedOut { Issue.record("the load thread did not stop") }
        return (answered.load(ordering: .relaxed), failed.load(ordering: .relaxed))
    }
}
