import Glibc
import Synchronization

/// The registry of open connections: the request deadline (`--request-timeout`), and how many
/// connections each address holds (``ConnectionShares``).
///
/// A connection must deliver each complete request within the timeout of its start or of the
/// previous response, however it trickles its bytes, and take each response within the timeout
/// of its queueing (plus the time its size needs at
/// ``HTTPServerOptions/slowestReadingBytesPerSecond``), however it spreads its reads:
/// libmicrohttpd's timeout restarts at every `send` that moves a byte, so a client reading a
/// large answer a few bytes at a time kept its slot for as long as it liked.
///
/// libmicrohttpd's own timeout counts idle time only, so a client that sends one header line
/// every few seconds keeps a connection (and with many of them, every connection slot) forever.
/// libmicrohttpd has no deadline for a whole request, so this builds one beside it: every
/// connection registers a ``TrackedConnection`` when it starts, and a sweep each second shuts down
/// (`shutdown(2)`, not `close`) the sockets of connections past their deadline. libmicrohttpd
/// then sees the end of the stream and closes the connection on its own thread, with all its
/// bookkeeping, as if the client had hung up.
///
/// The sweep holds the registry's lock while it shuts sockets down, and a connection leaves the
/// registry (under the same lock) before libmicrohttpd closes its socket, so a descriptor number
/// the kernel has already handed to a newer connection is never touched. The counts by address
/// change under the same lock as the registry, so the sweep and the accept policy see both alike.
///
/// Under pressure (``ConnectionShares``) the sweep also shuts down, by the same rules, every
/// connection that has owed a request for 2 s while its address holds more than its fair share:
/// such quiet slots come back long before the deadline, while the connections of the same address
/// whose requests are being answered (``TrackedConnection`` owes nothing then) go on.
///
/// And under pressure, a connection open for longer than the request timeout is closed after its
/// next response (`Connection: close`), its request answered. Without it, connections that send a
/// cheap request every second or two never owed one for long and held their slots for as long as
/// they liked: a flood from 300 addresses sending `GET /healthz` every 1.5 s kept all 1000 slots,
/// and a login from another address waited for as long as the flood lasted (Benchmarks/flood).
/// Now every slot comes back within the timeout and a response, to be taken again in the order
/// the connections wait in the listening socket's queue, where the fair share applies again.
final class RequestDeadlines: Sendable {
    /// The open connections, and how many each address holds (addresses with none are left out).
    private struct Registry {
        var connections: [ObjectIdentifier: TrackedConnection] = [:]
        var heldByPeer: [RateLimitKey: Int] = [:]
        /// Connections shut down to make room for a newcomer and not yet closed by their worker:
        /// they count neither as open nor for their address any more.
        var evicted: Set<ObjectIdentifier> = []
        /// Connections the accept policy admitted and libmicrohttpd has not started yet: when each
        /// was admitted, per address, oldest first. Counted for their address and against the
        /// limit from the admission on, so that two worker threads admitting at the same moment
        /// each see the other's connection.
        var reserved: [RateLimitKey: [UInt64]] = [:]
        var reservedCount = 0
        /// What was refused and shut down so far (``ConnectionFigures/open`` is not kept here).
        var figures = ConnectionFigures()

        /// The connections that count against the limit.
        var open: Int { connections.count - evicted.count + reservedCount }

        /// Counts a connection just admitted for `peer` until it starts.
        mutating func reserve(_ peer: RateLimitKey, now: UInt64) {
            heldByPeer[peer, default: 0] += 1
            reserved[peer, default: []].append(now)
            reservedCount += 1
        }

        /// Counts a connection that started for `peer`: it takes over a reservation, or is counted
        /// anew (one the accept policy never saw). It takes the newest: a connection starts on the
        /// thread that admitted it, microseconds later, so an older reservation is one whose
        /// connection libmicrohttpd refused, and is left to ``dropReservations(admittedBefore:)``.
        mutating func started(_ peer: RateLimitKey) {
            guard var admissions = reserved[peer], !admissions.isEmpty else {
                heldByPeer[peer, default: 0] += 1
                return
            }
            admissions.removeLast()
            reserved[peer] = admissions.isEmpty ? nil : admissions
            reservedCount -= 1
        }

        /// Forgets each reservation admitted before `cutoff`: its connection never started
        /// (libmicrohttpd refused it after the accept policy, at its own limit), and would
        /// otherwise count for ever, even while its address goes on being admitted.
        mutating func dropReservations(admittedBefore cutoff: UInt64) {
            for (peer, admissions) in reserved {
                let stale = admissions.prefix { $0 < cutoff }.count
                guard stale > 0 else { continue }
                for _ in 0..<stale { release(peer) }
                reservedCount -= stale
                reserved[peer] = stale == admissions.count ? nil : Array(admissions.dropFirst(stale))
            }
        }

        /// Takes `connection` out of the counts and shuts its socket down, if it still owes the
        /// request it has owed since `since`; its worker closes it. False when its request came
        /// in meanwhile: the connection is being answered and stays.
        mutating func evict(_ connection: TrackedConnection, owedSince since: UInt64) -> Bool {
            guard !evicted.contains(ObjectIdentifier(connection)), connection.claimShutdown(owedSince: since)
            else { return false }
            evicted.insert(ObjectIdentifier(connection))
            figures.shutDownToMakeRoom += 1
            if let peer = connection.peer { release(peer) }
            shutdown(connection.descriptor, Int32(SHUT_RDWR))
            return true
        }

        /// One connection fewer for `peer`; an address with none is forgotten.
        mutating func release(_ peer: RateLimitKey) {
            let left = heldByPeer[peer, default: 0] - 1
            heldByPeer[peer] = left > 0 ? left : nil
        }

        /// The connection whose slot a newcomer from an address that holds `held` takes at the
        /// limit `now`: of the connections that owe a request (none being answered is touched),
        /// one of the address that holds the most, if it holds more than the newcomer will with
        /// the new one (so that room is made only where it evens the shares out, and two
        /// addresses never take slots from each other in turn), or as many when it has owed its
        /// request for ``ConnectionShares/reclaimAfterNanoseconds`` (so that more addresses than
        /// slots, each holding one, still let a newcomer in, each slot turning over at most every
        /// 2 s); of those, the one that has owed its request the longest. Nil when there is none.
        func connectionToEvict(newcomerHolds held: Int, now: UInt64) -> (TrackedConnection, owedSince: UInt64)? {
            var chosen: (connection: TrackedConnection, held: Int, since: UInt64)?
            for (identifier, connection) in connections where !evicted.contains(identifier) {
                guard let peer = connection.peer, let since = connection.owesRequestSince else { continue }
                let peerHolds = heldByPeer[peer, default: 0]
                let longIdle =
                    ServerClock.nanoseconds(from: since, to: now) >= ConnectionShares.reclaimAfterNanoseconds
                guard peerHolds > held + 1 || (peerHolds > held && longIdle) else { continue }
                if let best = chosen, best.held > peerHolds || (best.held == peerHolds && best.since <= since) {
                    continue
                }
                chosen = (connection, peerHolds, since)
            }
            return chosen.map { ($0.connection, $0.since) }
        }
    }

    private let timeoutNanoseconds: UInt64
    /// Nanoseconds a response's client is allowed per byte on top of the timeout.
    private let allowedNanosecondsPerByte: UInt64
    private let shares: ConnectionShares
    private let registry = Mutex(Registry())
    private let sweeper = Mutex<RepeatingTimer?>(nil)

    /// Starts the sweep, once a second.
    init(
        timeoutSeconds: Int, shares: ConnectionShares,
        slowestReadingBytesPerSecond: Int = HTTPServerOptions.defaultSlowestReadingBytesPerSecond
    ) {
        timeoutNanoseconds = UInt64(max(timeoutSeconds, 1)) * 1_000_000_000
        allowedNanosecondsPerByte = 1_000_000_000 / UInt64(min(max(slowestReadingBytesPerSecond, 1), 1_000_000_000))
        self.shares = shares
        let timer = RepeatingTimer(intervalSeconds: 1, leewayMilliseconds: 100) { [weak self] in
            self?.sweep(now: ServerClock.monotonicNanoseconds())
        }
        sweeper.withLock { $0 = timer }
    }

    /// Whether a new connection from `peer` may start (the accept policy asks, before
    /// libmicrohttpd starts it): within the per-address limit, and within the fair share under
    /// pressure; one without an address is not counted. At the limit, a connection within its
    /// share is admitted only when it can make room: an idle connection of an address that holds
    /// more (``Registry/connectionToEvict(newcomerHolds:now:)``) is shut down, under the registry's
    /// lock like the sweep's. `now` is the monotonic clock's reading (tests set it).
    func admit(_ peer: RateLimitKey?, now: UInt64 = ServerClock.monotonicNanoseconds()) -> Bool {
        guard let peer else { return true }
        return registry.withLock { registry in
            let held = registry.heldByPeer[peer, default: 0]
            switch shares.admission(held: held, open: registry.open, addresses: registry.heldByPeer.count) {
            case .admit:
                registry.reserve(peer, now: now)
                return true
            case .refuse:
                registry.figures.refusedOverShare += 1
                return false
            case .admitMakingRoom:
                // Nothing to make room from: closed at once rather than left to wait, since
                // libmicrohttpd would stop accepting once the headroom filled, and the queue
                // behind it would fill with a flood's reconnects again.
                // A candidate whose request comes in while it is chosen is not cut; the next one
                // is taken (each try leaves one connection fewer that owes a request).
                while let (idle, since) = registry.connectionToEvict(newcomerHolds: held, now: now) {
                    if registry.evict(idle, owedSince: since) {
                        registry.reserve(peer, now: now)
                        return true
                    }
                }
                registry.figures.refusedForNoRoom += 1
                return false
            }
        }
    }

    /// Starts the deadline of a response of `bytes` bytes just queued on `connection` at `now`:
    /// the timeout, after the time its size needs at the slowest reading rate allowed, at most
    /// ``longestSizeAllowanceNanoseconds``.
    func responseQueued(on connection: TrackedConnection, bytes: Int, now: UInt64) {
        let allowance = UInt64(max(bytes, 0)).multipliedReportingOverflow(by: allowedNanosecondsPerByte)
        let longest = Self.longestSizeAllowanceNanoseconds
        let capped = allowance.overflow ? longest : min(allowance.partialValue, longest)
        connection.responseQueued(countingFrom: now.addingReportingOverflow(capped).partialValue)
    }

    /// Two minutes: the most a response's size adds to its deadline, so that a client taking
    /// nothing holds its slot for at most that and the timeout (2 MB at 16 KiB/s: the SSH
    /// revocation list of 20,000 revoked devices).
    static let longestSizeAllowanceNanoseconds: UInt64 = 120 * 1_000_000_000

    /// Registers a connection that libmicrohttpd just accepted.
    func connectionStarted(descriptor: Int32, clientAddress: String, peer: RateLimitKey?) -> TrackedConnection {
        let connection = TrackedConnection(
            descriptor: descriptor, clientAddress: clientAddress, peer: peer, now: ServerClock.monotonicNanoseconds())
        registry.withLock { registry in
            registry.connections[ObjectIdentifier(connection)] = connection
            if let peer { registry.started(peer) }
        }
        return connection
    }

    /// Forgets a connection; libmicrohttpd closes its socket after this returns.
    func connectionClosed(_ connection: TrackedConnection) {
        registry.withLock { registry in
            let identifier = ObjectIdentifier(connection)
            guard registry.connections.removeValue(forKey: identifier) != nil,
                registry.evicted.remove(identifier) == nil, let peer = connection.peer
            else { return }
            registry.release(peer)
        }
    }

    /// Connections currently registered.
    var count: Int {
        registry.withLock { $0.connections.count }
    }

    /// What the registry refused and shut down so far, and the connections open now.
    var figures: ConnectionFigures {
        registry.withLock { registry in
            var figures = registry.figures
            figures.open = registry.connections.count
            return figures
        }
    }

    /// Connections counted for `peer` (those shut down to make room no longer are).
    func count(from peer: RateLimitKey) -> Int {
        registry.withLock { $0.heldByPeer[peer, default: 0] }
    }

    /// Shuts down every connection past its deadline at `now` and, under pressure, every one
    /// that has owed a request for ``ConnectionShares/reclaimAfterNanoseconds`` while its address
    /// holds more than its fair share; returns how many. Under pressure, also has every connection
    /// open for longer than the timeout close after its next response.
    @discardableResult
    func sweep(now: UInt64) -> Int {
        let reclaimTimeout = min(ConnectionShares.reclaimAfterNanoseconds, timeoutNanoseconds)
        return registry.withLock { registry in
            // A connection starts microseconds after its admission; one not started within a
            // second never will.
            registry.dropReservations(admittedBefore: now >= 1_000_000_000 ? now - 1_000_000_000 : 0)
            let underPressure = shares.isUnderPressure(open: registry.open)
            var shut = 0
            for (identifier, connection) in registry.connections where !registry.evicted.contains(identifier) {
                if underPressure, ServerClock.nanoseconds(from: connection.startedAt, to: now) > timeoutNanoseconds {
                    connection.closeAfterResponse()
                }
                if let sending = connection.sendingSince {
                    // A response not taken in time: linger 0 has the close drop what is still
                    // queued for the client rather than keep it for a reader that never comes.
                    guard ServerClock.nanoseconds(from: sending, to: now) > timeoutNanoseconds,
                        connection.claimShutdown(sendingSince: sending)
                    else { continue }
                    var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                    _ = setsockopt(
                        connection.descriptor, SOL_SOCKET, SO_LINGER, &linger,
                        socklen_t(MemoryLayout<Glibc.linger>.size))
                    shutdown(connection.descriptor, Int32(SHUT_RDWR))
                    registry.figures.shutDownResponseUntaken += 1
                    shut += 1
                    continue
                }
                guard let since = connection.owesRequestSince else { continue }
                let reclaimed =
                    underPressure
                    && connection.peer.map {
                        shares.reclaims(held: registry.heldByPeer[$0, default: 0], addresses: registry.heldByPeer.count)
                    } == true
                let owed = ServerClock.nanoseconds(from: since, to: now)
                let pastDeadline = owed > timeoutNanoseconds
                // Claimed before the shutdown, so that a request coming in at this instant is
                // either answered (the claim fails) or never acted on (its worker sees the claim).
                guard pastDeadline || (reclaimed && owed > reclaimTimeout),
                    connection.claimShutdown(owedSince: since)
                else { continue }
                shutdown(connection.descriptor, Int32(SHUT_RDWR))
                if pastDeadline {
                    registry.figures.shutDownPastDeadline += 1
                } else {
                    registry.figures.shutDownOverShare += 1
                }
                shut += 1
            }
            return shut
        }
    }

    /// Stops the sweep.
    func cancel() {
        sweeper.withLock { timer in
            timer?.cancel()
            timer = nil
        }
    }
}
