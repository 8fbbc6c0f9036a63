import Glibc
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// What counts as one address for the connection limits, and the counts' arithmetic.
@Suite("Connection shares by address")
struct ConnectionSharesTests {
    /// The key of a `sockaddr_in6` of `text`.
    static func key(ipv6 text: String) -> RateLimitKey? {
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        _ = text.withCString { inet_pton(AF_INET6, $0, &address.sin6_addr) }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { RateLimitKey(socketAddress: $0) }
        }
    }

    /// The key of a `sockaddr_in` of `text`.
    static func key(ipv4 text: String) -> RateLimitKey? {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(text)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { RateLimitKey(socketAddress: $0) }
        }
    }

    @Test("addresses of one /64 are one peer; an IPv4-mapped address is its IPv4 address")
    func keys() {
        let first = Self.key(ipv6: "2001:db8::a:1")
        #expect(first == .ipv6Prefix(0x2001_0db8_0000_0000))
        #expect(Self.key(ipv6: "2001:db8::ffff:ffff:ffff:ffff") == first)
        #expect(Self.key(ipv6: "2001:db8:0:1::1") == .ipv6Prefix(0x2001_0db8_0000_0001))
        #expect(Self.key(ipv6: "::ffff:192.0.2.1") == .ipv4(0xC000_0201))
        #expect(Self.key(ipv4: "192.0.2.1") == .ipv4(0xC000_0201))
        #expect(RateLimitKey(socketAddress: nil) == nil)
        var unix = sockaddr()
        unix.sa_family = sa_family_t(AF_UNIX)
        #expect(RateLimitKey(socketAddress: &unix) == nil)
    }

    @Test("an address is admitted up to its limit, again after a close, and forgotten when it has none")
    func counting() {
        // Room for 100, so the fair share plays no part.
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(limit: 100, perAddressLimit: 3))
        defer { registry.cancel() }
        let peer = RateLimitKey.ipv6Prefix(0x2001_0db8_0000_0000)
        let held = (0..<3).map { _ in
            #expect(registry.admit(peer))
            return registry.connectionStarted(descriptor: -1, clientAddress: "2001:db8::1", peer: peer)
        }
        #expect(!registry.admit(peer))
        #expect(registry.admit(.ipv4(0xC000_0201)))
        #expect(registry.admit(nil))
        registry.connectionClosed(held[0])
        #expect(registry.admit(peer))
        // Admitted and not started (libmicrohttpd refused it after the policy): it counts until
        // the sweep drops its reservation, a second on.
        #expect(registry.count(from: peer) == 3)
        for connection in held { registry.connectionClosed(connection) }
        // The second close of the first connection counted nothing: it was no longer registered.
        #expect(registry.count(from: peer) == 1)
        registry.sweep(now: ServerClock.monotonicNanoseconds() + 2_000_000_000)
        #expect(registry.count(from: peer) == 0)
        #expect(registry.count == 0)
    }

    @Test("connections admitted at the same moment, before either starts, count against the address")
    func admittedBeforeStarting() {
        // Two worker threads accept from one address at once: each admission is counted at once,
        // not when its connection starts, so the second sees the first. Before, both passed a
        // check of the started connections, and a flood got one connection past its share per
        // worker (FairShareTests saw 40 of 40 slots taken where the shares leave some free).
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(limit: 100, perAddressLimit: 2))
        defer { registry.cancel() }
        let peer = RateLimitKey.ipv4(0xC000_0201)
        #expect(registry.admit(peer))
        #expect(registry.admit(peer))
        #expect(!registry.admit(peer), "a third admission before either connection started")
        let started = (0..<2).map { _ in
            registry.connectionStarted(descriptor: -1, clientAddress: "192.0.2.1", peer: peer)
        }
        // Starting takes the reservations over: still two, not four.
        #expect(registry.count(from: peer) == 2)
        #expect(!registry.admit(peer))
        registry.sweep(now: ServerClock.monotonicNanoseconds() + 2_000_000_000)
        #expect(registry.count(from: peer) == 2, "started connections are not dropped with reservations")
        for connection in started { registry.connectionClosed(connection) }
        #expect(registry.count(from: peer) == 0)
        #expect(registry.admit(peer))
    }

    @Test("a reservation whose connection never started is dropped while its address goes on connecting")
    func staleReservationOfABusyAddress() {
        // libmicrohttpd refuses the first admitted connection after the policy; the address then
        // connects every half second. Before, the reservation counted until the address paused
        // for a second, so a busy address kept one connection too many counted for ever.
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(limit: 100, perAddressLimit: 2))
        defer { registry.cancel() }
        let peer = RateLimitKey.ipv4(0xC000_0201)
        let start = ServerClock.monotonicNanoseconds()
        let halfSecond: UInt64 = 500_000_000
        #expect(registry.admit(peer, now: start), "admitted, then refused by libmicrohttpd: never started")
        var open: [TrackedConnection] = []
        for step in 1...4 {
            let now = start + UInt64(step) * halfSecond
            #expect(registry.admit(peer, now: now))
            open.append(registry.connectionStarted(descriptor: -1, clientAddress: "192.0.2.1", peer: peer))
            registry.sweep(now: now + 1)
            // From the third step on, the refused connection's reservation is over a second old.
            #expect(registry.count(from: peer) == (step < 2 ? 2 : 1), "step \(step)")
            registry.connectionClosed(open.removeFirst())
        }
        #expect(registry.count(from: peer) == 0)
        #expect(registry.admit(peer))
        #expect(registry.admit(peer), "both of the address's two slots are free")
    }

    @Test("the fair share is an eighth of the per-address limit, at least one, and none without a limit")
    func fairShares() {
        let defaults = ConnectionShares(limit: 1000, perAddressLimit: 32)
        #expect(defaults.fairShare == 4)
        #expect(defaults.pressureThreshold == 750)
        #expect(ConnectionShares(limit: 1000, perAddressLimit: 7).fairShare == 1)
        #expect(ConnectionShares(limit: 1000, perAddressLimit: 0).fairShare == nil)
        #expect(ConnectionShares(limit: 1, perAddressLimit: 32).pressureThreshold == 1)
        #expect(ConnectionShares(limit: 41, perAddressLimit: 32).pressureThreshold == 31)

        // Below pressure the per-address limit; under it, the fair share.
        #expect(defaults.admission(held: 31, open: 749, addresses: 30) == .admit)
        #expect(defaults.admission(held: 32, open: 0, addresses: 1) == .refuse)
        #expect(defaults.admission(held: 3, open: 999, addresses: 100) == .admit)
        #expect(defaults.admission(held: 4, open: 750, addresses: 100) == .refuse)
        #expect(!defaults.reclaims(held: 4, addresses: 100))
        #expect(defaults.reclaims(held: 5, addresses: 100))
        let unlimited = ConnectionShares(limit: 1000, perAddressLimit: 0)
        #expect(unlimited.admission(held: 999, open: 999, addresses: 1) == .admit)
        #expect(!unlimited.reclaims(held: 999, addresses: 1))
        #expect(unlimited.fairShare(addresses: 1000) == nil)
    }

    @Test("the share shrinks as more addresses hold connections, so that a quarter stays for newcomers")
    func sharesDividedAmongAddresses() {
        let defaults = ConnectionShares(limit: 1000, perAddressLimit: 32)
        // Up to 187 addresses the share is 4; from 188 on, 750 divided among them.
        #expect(defaults.fairShare(addresses: 0) == 4)
        #expect(defaults.fairShare(addresses: 187) == 4)
        #expect(defaults.fairShare(addresses: 188) == 3)
        #expect(defaults.fairShare(addresses: 300) == 2)
        #expect(defaults.fairShare(addresses: 751) == 1)
        #expect(defaults.fairShare(addresses: 5000) == 1)
        // 300 addresses at 3 each: refused a fourth, and the sweep takes back what owes a request.
        #expect(defaults.admission(held: 2, open: 900, addresses: 300) == .refuse)
        #expect(defaults.admission(held: 1, open: 900, addresses: 300) == .admit)
        #expect(defaults.reclaims(held: 3, addresses: 300))
        #expect(!defaults.reclaims(held: 3, addresses: 100))
        // A newcomer always gets its first connection, while the total allows.
        #expect(defaults.admission(held: 0, open: 999, addresses: 5000) == .admit)
    }

    @Test("at the limit a newcomer within its share is admitted making room; beyond its share it is refused")
    func admissionAtTheLimit() {
        let defaults = ConnectionShares(limit: 1000, perAddressLimit: 32)
        #expect(defaults.evictionHeadroom == 31)
        #expect(defaults.socketLimit == 1031)
        #expect(ConnectionShares(limit: 40, perAddressLimit: 16).evictionHeadroom == 2)
        #expect(ConnectionShares(limit: 100_000, perAddressLimit: 32).evictionHeadroom == 32)
        // 100 addresses: a share of 4. At the limit the open count no longer decides alone.
        #expect(defaults.admission(held: 0, open: 1000, addresses: 100) == .admitMakingRoom)
        #expect(defaults.admission(held: 3, open: 1010, addresses: 100) == .admitMakingRoom)
        #expect(defaults.admission(held: 4, open: 1000, addresses: 100) == .refuse)
        // No per-address limit: no share, no headroom; libmicrohttpd's limit alone.
        let unlimited = ConnectionShares(limit: 1000, perAddressLimit: 0)
        #expect(unlimited.evictionHeadroom == 0)
        #expect(unlimited.admission(held: 999, open: 1000, addresses: 1) == .admit)
    }

    @Test("making room shuts down the longest idle connection of the greediest address, never a busy one")
    func makingRoomAtTheLimit() throws {
        // 8 slots, pressure from 6; a fair share of 1.
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(limit: 8, perAddressLimit: 8))
        defer { registry.cancel() }
        let greedy = RateLimitKey.ipv4(1)
        let peers: [RateLimitKey] = [greedy, greedy, greedy, greedy, .ipv4(2), .ipv4(2), .ipv4(3), .ipv4(4)]
        let pairs = try peers.map { _ in try SocketPair() }
        let base = ServerClock.monotonicNanoseconds()
        let tracked = zip(peers, pairs).enumerated().map { index, element in
            let (peer, pair) = element
            let connection = registry.connectionStarted(descriptor: pair.server, clientAddress: "", peer: peer)
            // Idle since their own moment, the greedy address's last one the longest.
            connection.requestEnded(now: base - UInt64(index == 3 ? 10_000 : index))
            return connection
        }
        #expect(tracked[0].requestReceived())  // being answered: never shut down

        // A newcomer gets in; the greedy address's longest idle connection made room.
        #expect(registry.admit(.ipv4(9)))
        #expect(pairs.map(\.isShutDown) == [false, false, false, true, false, false, false, false])
        #expect(registry.count(from: greedy) == 3)
        let newcomer = try SocketPair()
        _ = registry.connectionStarted(descriptor: newcomer.server, clientAddress: "", peer: .ipv4(9))
        // Its close, when the worker sees the shutdown, does not count the address down again.
        registry.connectionClosed(tracked[3])
        #expect(registry.count(from: greedy) == 3)
        #expect(registry.count == 8)

        // At the limit again: an address at its share is refused, and nothing is shut down.
        #expect(!registry.admit(.ipv4(3)))
        #expect(pairs.filter(\.isShutDown).count == 1)
        // The next newcomer takes the greedy address's next idle connection (idle the longest of
        // its two), not the busy one, nor one of the address holding two.
        #expect(registry.admit(.ipv4(10)))
        #expect(pairs.map(\.isShutDown) == [false, false, true, true, false, false, false, false])
        // Counted for /metrics: two shut down to make room, one refused over its share.
        var expected = ConnectionFigures()
        expected.open = 8
        expected.refusedOverShare = 1
        expected.shutDownToMakeRoom = 2
        #expect(registry.figures == expected)
    }

    @Test("at the limit, with no address holding more than a newcomer would, it is refused and nothing is shut down")
    func nothingToMakeRoomFrom() throws {
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(limit: 4, perAddressLimit: 8))
        defer { registry.cancel() }
        let pairs = try (0..<4).map { _ in try SocketPair() }
        for (index, pair) in pairs.enumerated() {
            _ = registry.connectionStarted(descriptor: pair.server, clientAddress: "", peer: .ipv4(UInt32(index + 1)))
        }
        // Every address holds one, none idle for 2 s: the newcomer is closed at once, so that
        // libmicrohttpd goes on accepting and the listening socket's queue stays short.
        #expect(!registry.admit(.ipv4(9)))
        #expect(pairs.allSatisfy { !$0.isShutDown })
        #expect(registry.figures.refusedForNoRoom == 1)
    }

    @Test("at the limit, with every address holding one, a newcomer takes the slot of one idle for 2 s")
    func makingRoomAmongEqualAddresses() throws {
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(limit: 4, perAddressLimit: 8))
        defer { registry.cancel() }
        let pairs = try (0..<4).map { _ in try SocketPair() }
        let now = ServerClock.monotonicNanoseconds()
        for (index, pair) in pairs.enumerated() {
            let connection = registry.connectionStarted(
                descriptor: pair.server, clientAddress: "", peer: .ipv4(UInt32(index + 1)))
            // The third has owed its request for 3 s, the others for 1 s.
            connection.requestEnded(now: now - (index == 2 ? 3_000_000_000 : 1_000_000_000))
        }
        #expect(registry.admit(.ipv4(9)))
        #expect(pairs.map(\.isShutDown) == [false, false, true, false])
        // An address that holds one already is refused: it holds its share (1 of 4 slots under
        // pressure among 4 addresses).
        #expect(!registry.admit(.ipv4(1)))
    }

    @Test("the connection figures are in /metrics once a listener's are observed")
    func figuresInMetrics() {
        let metrics = ServerMetrics()
        #expect(!metrics.render().contains("keyauth_connections_open"))
        var figures = ConnectionFigures()
        figures.open = 7
        figures.refusedForNoRoom = 2
        figures.shutDownToMakeRoom = 5
        let observed = figures
        metrics.observeConnections { observed }
        let text = metrics.render()
        #expect(text.contains("keyauth_connections_open 7\n"))
        #expect(text.contains("keyauth_connections_refused_total{reason=\"no_room\"} 2\n"))
        #expect(text.contains("keyauth_connections_refused_total{reason=\"share\"} 0\n"))
        #expect(text.contains("keyauth_connections_shut_down_total{reason=\"make_room\"} 5\n"))
    }

    @Test("under pressure the sweep shuts down what owes a request of an address above its share, nothing else")
    func sweepUnderPressure() throws {
        // 8 slots, pressure from 6; a fair share of 1.
        let registry = RequestDeadlines(timeoutSeconds: 10, shares: ConnectionShares(limit: 8, perAddressLimit: 8))
        defer { registry.cancel() }
        let greedy = RateLimitKey.ipv4(1)
        let modest = RateLimitKey.ipv4(2)
        let peers = [greedy, greedy, greedy, greedy, modest]
        let pairs = try peers.map { _ in try SocketPair() }
        let tracked = zip(peers, pairs).map { peer, pair in
            registry.connectionStarted(descriptor: pair.server, clientAddress: "", peer: peer)
        }
        #expect(tracked[0].requestReceived())  // being answered
        let now = ServerClock.monotonicNanoseconds()
        // Five of eight: no pressure, and nobody is past the 10 s deadline.
        #expect(registry.sweep(now: now + 3_000_000_000) == 0)
        let sixth = try SocketPair()
        _ = registry.connectionStarted(descriptor: sixth.server, clientAddress: "", peer: .ipv4(3))
        // Six: pressure. Within 2 s nothing is shut down; past it, the greedy address's three quiet ones.
        #expect(registry.sweep(now: now + 1_000_000_000) == 0)
        #expect(registry.sweep(now: now + 3_000_000_000) == 3)
        #expect(pairs.map(\.isShutDown) == [false, true, true, true, false])
        #expect(!sixth.isShutDown)
        // Past the 10 s deadline the modest address's idle one goes too, counted apart.
        #expect(registry.sweep(now: now + 11_000_000_000) >= 1)
        #expect(pairs[4].isShutDown)
        let figures = registry.figures
        #expect(figures.shutDownOverShare == 3)
        #expect(figures.shutDownPastDeadline >= 1)
    }

    @Test("under pressure a connection open longer than the request timeout closes after its next response")
    func oldConnectionsCloseUnderPressure() throws {
        // 8 slots, pressure from 6; no per-address limit, so nothing is reclaimed by share.
        let registry = RequestDeadlines(timeoutSeconds: 10, shares: ConnectionShares(limit: 8, perAddressLimit: 0))
        defer { registry.cancel() }
        let pairs = try (0..<6).map { _ in try SocketPair() }
        let now = ServerClock.monotonicNanoseconds()
        // Busy: each has a request being answered, so none is ever past its deadline.
        var tracked: [TrackedConnection] = []
        func open(_ index: Int) {
            tracked.append(
                registry.connectionStarted(descriptor: pairs[index].server, clientAddress: "", peer: .ipv4(1)))
            #expect(tracked[index].requestReceived())
        }
        (0..<5).forEach(open)
        // Five of eight, no pressure: age alone changes nothing.
        #expect(registry.sweep(now: now + 11_000_000_000) == 0)
        #expect(tracked.allSatisfy { !$0.closesAfterResponse }, "no pressure")
        open(5)
        // Six: pressure. Younger than the 10 s timeout, nothing changes either.
        #expect(registry.sweep(now: now + 9_000_000_000) == 0)
        #expect(tracked.allSatisfy { !$0.closesAfterResponse }, "younger than the timeout")
        // Older: each closes after its response, and none is shut down meanwhile.
        #expect(registry.sweep(now: now + 11_000_000_000) == 0)
        #expect(tracked.allSatisfy { $0.closesAfterResponse })
        #expect(pairs.allSatisfy { !$0.isShutDown })
    }
}

/// A connected pair of local stream sockets: one end plays the server's connection, and the other
/// tells whether it was shut down.
private final class SocketPair {
    let server: Int32
    private let client: Int32

    init() throws {
        var descriptors: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &descriptors) == 0 else {
            throw TestFailure("socketpair() failed")
        }
        server = descriptors[0]
        client = descriptors[1]
    }

    deinit {
        close(server)
        close(client)
    }

    /// Whether the server's end was shut down: the client's end reads the end of the stream
    /// rather than finding nothing to read yet.
    var isShutDown: Bool {
        var byte: UInt8 = 0
        return recv(client, &byte, 1, Int32(MSG_DONTWAIT)) == 0
    }
}
