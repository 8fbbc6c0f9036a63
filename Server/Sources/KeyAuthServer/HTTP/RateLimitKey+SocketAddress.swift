import Glibc

extension RateLimitKey {
    /// The key of a peer's socket address as libmicrohttpd reports it: an IPv4 address, an IPv6
    /// /64, or the IPv4 address an IPv4-mapped IPv6 address maps; nil for none or another family.
    ///
    /// Read straight from the `sockaddr`, so the connection counts need no text of the address.
    init?(socketAddress address: UnsafePointer<sockaddr>?) {
        guard let address else { return nil }
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            let ipv4 = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
            self = .ipv4(UInt32(bigEndian: ipv4))
        case AF_INET6:
            let bytes = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
            }
            self.init(ipv6: bytes)
        default:
            return nil
        }
    }
}
