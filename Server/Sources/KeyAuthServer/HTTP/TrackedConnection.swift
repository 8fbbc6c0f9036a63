import Synchronization

/// An open connection as the server tracks it: its socket, its peer's address (as text and as
/// the key the connection counts are kept by), and when it began to owe the server a complete
/// request.
///
/// Created when libmicrohttpd accepts the connection and kept in its socket context until the
/// connection's close notice, which libmicrohttpd sends before it closes the socket, so the
/// descriptor stays this connection's for the object's whole registration.
final class TrackedConnection: Sendable {
    /// The connection's socket.
    let descriptor: Int32
    /// The peer's IP address as text, formatted once for all the connection's requests.
    let clientAddress: String
    /// The address (or IPv6 /64) the connection counts against, or nil for a peer without one.
    let peer: RateLimitKey?
    /// Monotonic nanoseconds at the connection's start.
    let startedAt: UInt64
    /// Monotonic nanoseconds since the connection owes a complete request (its start, or the end
    /// of the previous response), or 0 while a received request is being answered.
    private let owedSince: Atomic<UInt64>
    /// Whether its next response closes the connection (``closeAfterResponse()``).
    private let closing = Atomic<Bool>(false)

    init(descriptor: Int32, clientAddress: String, peer: RateLimitKey?, now: UInt64) {
        self.descriptor = descriptor
        self.clientAddress = clientAddress
        self.peer = peer
        startedAt = now
        owedSince = Atomic(now)
    }

    /// Has the next response (or the one being prepared) say `Connection: close`, so that the
    /// connection gives its slot back once its request is answered (``RequestDeadlines``).
    func closeAfterResponse() {
        closing.store(true, ordering: .relaxed)
    }

    /// Whether a response on this connection closes it.
    var closesAfterResponse: Bool {
        closing.load(ordering: .relaxed)
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

    /// Monotonic nanoseconds since the connection owes a complete request, or nil while one is
    /// being answered.
    var owesRequestSince: UInt64? {
        let since = owedSince.load(ordering: .relaxed)
        return since == 0 ? nil : since
    }

    /// Whether the connection owes a request for longer than `timeout` nanoseconds at `now`.
    func isOverdue(now: UInt64, timeout: UInt64) -> Bool {
        let since = owedSince.load(ordering: .relaxed)
        return since != 0 && ServerClock.nanoseconds(from: since, to: now) > timeout
    }
}
