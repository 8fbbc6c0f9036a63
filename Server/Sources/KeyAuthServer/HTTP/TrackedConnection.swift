import Synchronization

/// An open connection as the server tracks it: its socket, its peer's address (as text and as
/// the key the connection counts are kept by), and when it began to owe the server a complete
/// request, or to owe its client the reading of a response.
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
    /// of the previous response), 0 while a received request is being answered, the moment its
    /// response was queued with ``sendingTag`` set while the client takes it, or
    /// ``shutDownMark`` once the registry has shut the socket down. The registry claims a
    /// connection and the worker claims its request by exchanging this one value, so exactly one
    /// of them wins (``requestReceived()``, ``claimShutdown(owedSince:)``).
    private let owedSince: Atomic<UInt64>
    private static let shutDownMark = UInt64.max
    /// Marks a value of ``owedSince`` as the moment a response was queued: monotonic nanoseconds
    /// stay below 2^63 for centuries of uptime.
    private static let sendingTag: UInt64 = 1 << 63
    /// Whether its next response closes the connection (``closeAfterResponse()``).
    private let closing = Atomic<Bool>(false)
    /// Whether the raw target of the request being received escapes a zero byte in its path
    /// (``noteRawTarget(pathHoldsNUL:)``); libmicrohttpd hands the access handler the path
    /// decoded, where a `%00` ends it as a C string.
    private let rawPathHoldsNUL = Atomic<Bool>(false)

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

    /// Notes what libmicrohttpd's URI callback found in the raw target of the request that
    /// the connection is receiving; the access handler takes it with ``takeRawPathHoldsNUL()``.
    func noteRawTarget(pathHoldsNUL: Bool) {
        rawPathHoldsNUL.store(pathHoldsNUL, ordering: .relaxed)
    }

    /// Whether the raw path of the request now received held `%00`; resets it for the next one.
    func takeRawPathHoldsNUL() -> Bool {
        rawPathHoldsNUL.exchange(false, ordering: .relaxed)
    }

    /// Whether a response on this connection closes it.
    var closesAfterResponse: Bool {
        closing.load(ordering: .relaxed)
    }

    /// The whole request (head and body) is in: the server's own time to answer does not count.
    ///
    /// Returns false when the registry shut the connection down first (its deadline, its
    /// address's share, room for a newcomer): no answer can reach the client then, so the
    /// request must not be acted on either. A login answered into a shut socket would have used
    /// up its assertion while the client saw only a reset.
    func requestReceived() -> Bool {
        storeUnlessShutDown(0)
    }

    /// A response was handed to libmicrohttpd: its client has the request timeout counted from
    /// `start` (monotonic nanoseconds, its queueing plus what its size is allowed) to take it
    /// (``RequestDeadlines/responseQueued(on:bytes:now:)``), however it spreads its reads. A
    /// connection already shut down stays so.
    func responseQueued(countingFrom start: UInt64) {
        // Kept below the tag, and tagged below ``shutDownMark`` (all ones), which it would read as.
        storeUnlessShutDown(min(start, Self.sendingTag - 2) | Self.sendingTag)
    }

    /// The response went out (or the request ended otherwise): the next request is owed from
    /// `now`, idle keep-alive time included. A connection already shut down stays so.
    func requestEnded(now: UInt64) {
        storeUnlessShutDown(now)
    }

    /// Stores `value` as the owed-since value unless the registry has claimed the connection;
    /// whether it stored it.
    @discardableResult
    private func storeUnlessShutDown(_ value: UInt64) -> Bool {
        var since = owedSince.load(ordering: .relaxed)
        while since != Self.shutDownMark {
            let (exchanged, found) = owedSince.compareExchange(
                expected: since, desired: value, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            since = found
        }
        return false
    }

    /// Claims the connection for a shutdown if it still owes the request it has owed since
    /// `since` (a value ``owesRequestSince`` returned): false when its request came in meanwhile
    /// or it was claimed already. The caller shuts the socket down only after a true answer.
    func claimShutdown(owedSince since: UInt64) -> Bool {
        guard since != 0, since & Self.sendingTag == 0 else { return false }
        return owedSince.compareExchange(expected: since, desired: Self.shutDownMark, ordering: .acquiringAndReleasing)
            .exchanged
    }

    /// Claims the connection for a shutdown if its client is still taking the response queued
    /// at `since` (a value ``sendingSince`` returned): false once that response went out.
    func claimShutdown(sendingSince since: UInt64) -> Bool {
        guard since & Self.sendingTag == 0 else { return false }
        return owedSince.compareExchange(
            expected: since | Self.sendingTag, desired: Self.shutDownMark, ordering: .acquiringAndReleasing
        ).exchanged
    }

    /// Monotonic nanoseconds since the connection owes a complete request, or nil while one is
    /// being answered or sent, or once the connection is shut down.
    var owesRequestSince: UInt64? {
        let since = owedSince.load(ordering: .relaxed)
        return since == 0 || since & Self.sendingTag != 0 ? nil : since
    }

    /// Monotonic nanoseconds from which the request timeout counts for the response being sent
    /// (its queueing, plus the time its size is allowed), or nil when none is being sent.
    var sendingSince: UInt64? {
        let since = owedSince.load(ordering: .relaxed)
        return since != Self.shutDownMark && since & Self.sendingTag != 0 ? since & ~Self.sendingTag : nil
    }

    /// Whether the connection owes a request for longer than `timeout` nanoseconds at `now`.
    func isOverdue(now: UInt64, timeout: UInt64) -> Bool {
        guard let since = owesRequestSince else { return false }
        return ServerClock.nanoseconds(from: since, to: now) > timeout
    }
}
