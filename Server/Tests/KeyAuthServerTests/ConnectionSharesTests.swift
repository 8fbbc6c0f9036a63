import Glibc
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
        let registry = RequestDeadlines(timeoutSeconds: 60, shares: ConnectionShares(perAddressLimit: 3))
        defer { registry.cancel() }
        let peer = RateLimitKey.ipv6Prefix(0x2001_0db8_0000_0000)
        let held = (0..<3).map { _ in
            #expect(registry.admits(peer))
            return registry.connectionStarted(descriptor: -1, clientAddress: "2001:db8::1", peer: peer)
        }
        #expect(!registry.admits(peer))
        #expect(registry.admits(.ipv4(0xC000_0201)))
        #expect(registry.admits(nil))
        registry.connectionClosed(held[0])
        #expect(registry.admits(peer))
        for connection in held { registry.connectionClosed(connection) }
        // The second close of the first connection counted nothing: it was no longer registered.
        #expect(registry.count(from: peer) == 0)
        #expect(registry.count == 0)
        #expect(ConnectionShares(perAddressLimit: 0).admits(held: 1_000_000))
    }
}
