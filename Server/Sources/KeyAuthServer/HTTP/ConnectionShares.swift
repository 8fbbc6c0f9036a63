/// How the connection slots are shared between client addresses, each an IPv4 address or an
/// IPv6 /64 (``RateLimitKey``, as the rate limits count): a per-address limit always, and a fair
/// share while the server is under pressure.
///
/// The per-address limit alone let some 35 addresses that reopen their connections as they are
/// closed keep all 1000 slots (32 each), and every other client waited up to the 10 s request
/// deadline for one. From three quarters of the limit on, an address that already holds its fair
/// share (an eighth of the per-address limit) gets no new connection, and of every address that
/// holds more, the sweep shuts down the connections that have owed a request for 2 s
/// (``RequestDeadlines``). The share shrinks as more addresses hold connections
/// (``fairShare(addresses:)``), and the slots that greedy addresses hold quietly come back within
/// about 3 s. At the limit the server keeps accepting: a newcomer within its share takes the slot
/// of an idle connection of the address that holds the most (``admission(held:open:addresses:)``),
/// where before it waited in the listening socket's queue, which a flood from 300 addresses
/// filled until the kernel dropped its SYNs. Connections with a request in progress are never
/// shut down, so a benchmark's busy keep-alive connections keep going, until they are older than
/// the request timeout: then each closes after its next response (``RequestDeadlines``), so that
/// a sender that sends a request on each at least every 2 s gives its slots back too. With no
/// per-address limit (behind a trusted proxy, where every connection has the proxy's address)
/// there is no fair share either.
///
/// libmicrohttpd's own per-address limit counts full addresses, and a host usually holds a whole
/// /64: 40 of its addresses took all 1000 connection slots in an audit, and every other client
/// waited. So the accept policy counts by ``RateLimitKey`` for every family. libmicrohttpd still
/// checks IPv4 peers first, with the same limit. The accept policy counts a connection the moment
/// it admits it, before libmicrohttpd starts it, so that worker threads accepting at the same
/// moment each see the other's (``RequestDeadlines``).
struct ConnectionShares: Sendable {
    /// The most connections open at once (`--max-connections`, at least 1).
    let limit: Int
    /// The most connections one address may hold (`--max-connections-per-address`); 0 for no limit.
    let perAddressLimit: Int

    /// An address's fair share is an eighth of the per-address limit (at least one): with the
    /// default 32, four.
    ///
    /// A keyauth client uses one connection at a time and a browser seldom keeps more than a few
    /// busy; four each leaves the 1000 default slots to 250 addresses, where the per-address limit
    /// let 32 addresses take them all.
    static let fairShareDivisor = 8

    /// Nanoseconds a connection of an address above its fair share may owe a request under
    /// pressure before the sweep shuts it down: 2 s.
    ///
    /// Every keyauth client sends its request as soon as it connects, and a busy keep-alive
    /// connection sends its next one within a millisecond of the answer; one that has sent no
    /// complete request for 2 s while the slots run short only holds a slot that others wait for.
    /// Short of the 10 s deadline, so that a quiet slot comes back before a waiting client gives
    /// up, and not shorter, so that a client on a slow link still gets its request in.
    static let reclaimAfterNanoseconds: UInt64 = 2_000_000_000

    /// The open connections from which the server is under pressure: three quarters of the limit
    /// (rounded up).
    ///
    /// Below it nothing changes, so a benchmark or a proxy may open up to the per-address limit
    /// while the server has room; the last quarter is what a fair share keeps for the addresses
    /// that hold few connections.
    var pressureThreshold: Int { limit - limit / 4 }

    /// The connections an address may hold under pressure, or nil when there is no per-address
    /// limit.
    var fairShare: Int? {
        perAddressLimit > 0 ? max(1, perAddressLimit / Self.fairShareDivisor) : nil
    }

    /// Whether `open` connections put the server under pressure.
    func isUnderPressure(open: Int) -> Bool {
        open >= pressureThreshold
    }

    /// An address's share under pressure while `addresses` addresses hold connections: its
    /// ``fairShare``, but no more than the pressure threshold divided among those addresses (at
    /// least one); nil when there is no per-address limit.
    ///
    /// With the share fixed at four, 250 addresses could hold every one of the 1000 default
    /// slots at their share, and nothing was ever taken back from them. Divided among the
    /// addresses present, the shares leave the last quarter of the slots to newcomers; and once
    /// the slots are all taken, a newcomer within its share makes room for itself
    /// (``admission(held:open:addresses:)``).
    func fairShare(addresses: Int) -> Int? {
        fairShare.map { max(1, min($0, pressureThreshold / max(addresses, 1))) }
    }

    /// Connections libmicrohttpd may hold beyond ``limit``: a thirty-second of it, from 2 to 32;
    /// none without a per-address limit (there is no share to make room by).
    ///
    /// At the limit the server keeps accepting, so that the listening socket's queue does not
    /// fill and a newcomer's SYN is not dropped: a connection from an address beyond its share is
    /// closed at once, and one within it gets the slot of an idle connection of the greediest
    /// address (``admission(held:open:addresses:)``), or is closed at once when there is none.
    /// The headroom holds the connections shut down that way until their workers close them, a
    /// few milliseconds. `serve`'s descriptor reserve covers it (``DescriptorBudget/reserve``).
    var evictionHeadroom: Int {
        perAddressLimit > 0 ? min(32, max(2, limit / 32)) : 0
    }

    /// The connections libmicrohttpd is allowed: ``limit`` and ``evictionHeadroom``.
    var socketLimit: Int { limit + evictionHeadroom }

    /// What the accept policy does with a new connection.
    enum Admission: Equatable {
        /// Serve it.
        case admit
        /// Close it at once: its address holds its limit, or its share under pressure.
        case refuse
        /// At the limit: serve it if an idle connection of an address that holds more can be
        /// shut down to make room, else close it (``RequestDeadlines``).
        case admitMakingRoom
    }

    /// What happens to a new connection from an address that already holds `held` while `open`
    /// connections are open (those shut down to make room no longer count) and `addresses`
    /// addresses hold some.
    func admission(held: Int, open: Int, addresses: Int) -> Admission {
        guard perAddressLimit <= 0 || held < perAddressLimit else { return .refuse }
        guard let share = fairShare(addresses: addresses) else { return .admit }
        if held >= share, isUnderPressure(open: open) { return .refuse }
        return open < limit ? .admit : .admitMakingRoom
    }

    /// Whether, under pressure, the connections of an address that holds `held` (of `addresses`
    /// addresses holding some) give their slots back once they owe a request for
    /// ``reclaimAfterNanoseconds``.
    func reclaims(held: Int, addresses: Int) -> Bool {
        fairShare(addresses: addresses).map { held > $0 } ?? false
    }
}
