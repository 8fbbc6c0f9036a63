import Glibc
import Synchronization

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
