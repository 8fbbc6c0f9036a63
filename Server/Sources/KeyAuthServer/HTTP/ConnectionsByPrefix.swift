import Glibc
import Synchronization

/// The per-address connection limit for IPv6 peers, counted by /64 as the rate limits count
/// (``RateLimitKey``).
///
/// libmicrohttpd's own per-address limit counts full addresses, and a host usually holds a whole
/// /64: 40 of its addresses took all 1000 connection slots in an audit, and every other client
/// waited. IPv4 peers (and IPv4-mapped IPv6 ones) keep libmicrohttpd's limit, which counts them
/// right. The check (in the accept policy) and the count (when the connection starts) are two
/// steps, so worker threads accepting at the same moment can each pass one more connection.
final class ConnectionsByPrefix: Sendable {
    /// The most connections one /64 may hold; 0 for no limit.
    let limit: Int
    private let open = Mutex<[UInt64: Int]>([:])

    init(limit: Int) {
        self.limit = limit
    }

    /// The /64 of an IPv6 peer's address, or nil for IPv4 (mapped or not) and other families.
    static func prefix(of address: UnsafePointer<sockaddr>?) -> UInt64? {
        guard let address, address.pointee.sa_family == sa_family_t(AF_INET6) else { return nil }
        let bytes = UnsafeRawPointer(address).withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
            withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
        }
        // The same /64, and the same IPv4-mapped exception, as the rate limits.
        guard case .ipv6Prefix(let prefix) = RateLimitKey(ipv6: bytes) else { return nil }
        return prefix
    }

    /// Whether a new connection from `prefix` is within the limit.
    func admits(_ prefix: UInt64) -> Bool {
        limit <= 0 || open.withLock { $0[prefix, default: 0] } < limit
    }

    /// A connection from `prefix` started.
    func opened(_ prefix: UInt64) {
        open.withLock { $0[prefix, default: 0] += 1 }
    }

    /// A connection from `prefix` closed; a prefix with none left is forgotten.
    func closed(_ prefix: UInt64) {
        open.withLock { counts in
            let left = counts[prefix, default: 0] - 1
            counts[prefix] = left > 0 ? left : nil
        }
    }

    /// Connections open from `prefix`.
    func count(_ prefix: UInt64) -> Int {
        open.withLock { $0[prefix, default: 0] }
    }
}
