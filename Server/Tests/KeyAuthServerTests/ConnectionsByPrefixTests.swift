import Glibc
import Testing

@testable import KeyAuthServer

/// The IPv6 connection limit by /64: what counts as one peer, and the count's arithmetic.
@Suite("Connections by IPv6 /64")
struct ConnectionsByPrefixTests {
    /// A `sockaddr_in6` of `text`, passed to `body` as a `sockaddr`.
    static func withAddress<T>(_ text: String, _ body: (UnsafePointer<sockaddr>) -> T) -> T {
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        _ = text.withCString { inet_pton(AF_INET6, $0, &address.sin6_addr) }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0) }
        }
    }

    @Test("addresses of one /64 are one peer; an IPv4-mapped or IPv4 address is none of this limit's")
    func prefixes() {
        let first = Self.withAddress("2001:db8::a:1") { ConnectionsByPrefix.prefix(of: $0) }
        let second = Self.withAddress("2001:db8::ffff:ffff:ffff:ffff") { ConnectionsByPrefix.prefix(of: $0) }
        let other = Self.withAddress("2001:db8:0:1::1") { ConnectionsByPrefix.prefix(of: $0) }
        #expect(first != nil && first == second)
        #expect(other != nil && other != first)
        #expect(Self.withAddress("::ffff:192.0.2.1") { ConnectionsByPrefix.prefix(of: $0) } == nil)
        var v4 = sockaddr_in()
        v4.sin_family = sa_family_t(AF_INET)
        let ipv4 = withUnsafePointer(to: &v4) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { ConnectionsByPrefix.prefix(of: $0) }
        }
        #expect(ipv4 == nil)
        #expect(ConnectionsByPrefix.prefix(of: nil) == nil)
    }

    @Test("a /64 is admitted up to the limit, again after a close, and forgotten when it has none")
    func counting() {
        let limiter = ConnectionsByPrefix(limit: 3)
        let prefix: UInt64 = 0x2001_0db8_0000_0000
        for _ in 0..<3 {
            #expect(limiter.admits(prefix))
            limiter.opened(prefix)
        }
        #expect(!limiter.admits(prefix))
        #expect(limiter.admits(prefix + 1))
        limiter.closed(prefix)
        #expect(limiter.admits(prefix))
        for _ in 0..<2 { limiter.closed(prefix) }
        #expect(limiter.count(prefix) == 0)
        // A close without an open (it cannot happen) leaves no negative count behind.
        limiter.closed(prefix)
        #expect(limiter.count(prefix) == 0)
        #expect(ConnectionsByPrefix(limit: 0).admits(prefix))
    }
}
