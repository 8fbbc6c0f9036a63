/// How the connection slots are shared between client addresses, each an IPv4 address or an
/// IPv6 /64 (``RateLimitKey``, as the rate limits count).
///
/// libmicrohttpd's own per-address limit counts full addresses, and a host usually holds a whole
/// /64: 40 of its addresses took all 1000 connection slots in an audit, and every other client
/// waited. So the accept policy counts by ``RateLimitKey`` for every family. libmicrohttpd still
/// checks IPv4 peers first, with the same limit, and its count has no gap; here the check (in the
/// accept policy) and the count (when the connection starts) are two steps, so worker threads
/// accepting at the same moment can each pass one more connection.
struct ConnectionShares: Sendable {
    /// The most connections one address may hold (`--max-connections-per-address`); 0 for no limit.
    let perAddressLimit: Int

    /// Whether a new connection from an address that already holds `held` may start.
    func admits(held: Int) -> Bool {
        perAddressLimit <= 0 || held < perAddressLimit
    }
}
