import Glibc
import Synchronization

/// An open connection as the server tracks it: its socket, its peer's address, and when it
/// began to owe the server a complete request.
///
/// Created when libmicrohttpd accepts the connection and kept in its socket context until the
/// connection's close notice, which libmicrohttpd sends before it closes the socket, so the
/// descriptor stays this connection's for the object's whole registration.
final class TrackedConnection: Sendable {
    /// The connection's socket.
    let descriptor: Int32
    /// The peer's IP address as text, formatted once for all the connection's requests.
    let clientAddress: String
    /// Monotonic nanoseconds since the connection owes a complete request (its start, or the end
    /// of the previous response), or 0 while a received request is being answered.
    private let owedSince: Atomic<UInt64>

    init(descriptor: Int32, clientAddress: String, now: UInt64) {
        self.descriptor = descriptor
        self.clientAddress = clientAddress
        owedSince = Atomic(now)
    }

    /// The whole request (head and body) is in: the server's own time to answer does not count.
    func requestReceived() {
        owedSince.store(0, ordering: .relaxed)
    }

    /// The response went out (or the request ended otherwise): the next request is owed from
    /// `now`, idle keep-alive time included.
    func requestEnded(now: UInt64) {
        owedSince.store(now, ordering: .relaxed)
    }

    /// Whether the connection owes a request for longer than `timeout` nanoseconds at `now`.
    func isOverdue(now: UInt64, timeout: UInt64) -> Bool {
        let since = owedSince.load(ordering: .relaxed)
        return since != 0 && ServerClock.nanoseconds(from: since, to: now) > timeout
    }
}

/// The request deadline (`--request-timeout`): a connection must deliver each complete request
/// within the timeout of its start or of the previous response, however it trickles its bytes.
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
/// the kernel has already handed to a newer connection is never touched.
final class RequestDeadlines: Sendable {
    private let timeoutNanoseconds: UInt64
    private let connections = Mutex<[ObjectIdentifier: TrackedConnection]>([:])
    private let sweeper = Mutex<RepeatingTimer?>(nil)

    /// Starts the sweep, once a second.
    init(timeoutSeconds: Int) {
        timeoutNanoseconds = UInt64(max(timeoutSeconds, 1)) * 1_000_000_000
        let timer = RepeatingTimer(intervalSeconds: 1, leewayMilliseconds: 100) { [weak self] in
            self?.sweep(now: ServerClock.monotonicNanoseconds())
        }
        sweeper.withLock { $0 = timer }
    }

    /// Registers a connection that libmicrohttpd just accepted.
    func connectionStarted(descriptor: Int32, clientAddress: String) -> TrackedConnection {
        let connection = TrackedConnection(
            descriptor: descriptor, clientAddress: clientAddress, now: ServerClock.monotonicNanoseconds())
        connections.withLock { $0[ObjectIdentifier(connection)] = connection }
        return connection
    }

    /// Forgets a connection; libmicrohttpd closes its socket after this returns.
    func connectionClosed(_ connection: TrackedConnection) {
        _ = connections.withLock { $0.removeValue(forKey: ObjectIdentifier(connection)) }
    }

    /// Connections currently registered.
    var count: Int {
        connections.withLock { $0.count }
    }

    /// Shuts down every connection past its deadline at `now`; returns how many.
    @discardableResult
    func sweep(now: UInt64) -> Int {
        connections.withLock { connections in
            var overdue = 0
            for connection in connections.values where connection.isOverdue(now: now, timeout: timeoutNanoseconds) {
                shutdown(connection.descriptor, Int32(SHUT_RDWR))
                overdue += 1
            }
            return overdue
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
