import Glibc

/// What the rate limits count by: one IPv4 address, or one IPv6 /64.
///
/// An IPv6 host usually holds a whole /64 (SLAAC, privacy addresses) and may pick any of its
/// 2^64 addresses for each request, so counting full IPv6 addresses would give one attacker an
/// unlimited number of fresh budgets. An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, what a
/// dual-stack socket reports for an IPv4 peer) counts as the IPv4 address it maps.
package enum RateLimitKey: Hashable, Sendable {
    /// An IPv4 address.
    case ipv4(UInt32)
    /// The first 64 bits of an IPv6 address.
    case ipv6Prefix(UInt64)
    /// Text that is not an IP address (only callers that are not the transport make these).
    case other(String)

    /// The key for a numeric address as the transport or a trusted proxy reports it.
    package init(address: String) {
        self = Self(parsing: address) ?? .other(address)
    }

    /// The key for a numeric IPv4 or IPv6 address, or nil when `text` is not one.
    package init?(parsing text: String) {
        // `withCString` lends a short string's bytes from the stack; passing `text` straight to
        // the C parameter would copy it to the heap on every request.
        var v4 = in_addr()
        if text.withCString({ inet_pton(AF_INET, $0, &v4) }) == 1 {
            self = .ipv4(UInt32(bigEndian: v4.s_addr))
            return
        }
        var v6 = in6_addr()
        guard text.withCString({ inet_pton(AF_INET6, $0, &v6) }) == 1 else { return nil }
        self.init(ipv6: withUnsafeBytes(of: &v6) { Array($0) })
    }

    /// The key for the 16 bytes of an IPv6 address: its /64, or the IPv4 address it maps.
    init(ipv6 bytes: [UInt8]) {
        if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            self = .ipv4(bytes[12..<16].reduce(0) { $0 << 8 | UInt32($1) })
        } else {
            self = .ipv6Prefix(bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) })
        }
    }
}
