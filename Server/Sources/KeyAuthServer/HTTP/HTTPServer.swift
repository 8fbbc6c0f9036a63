internal import CKeyAuthMicroHTTPD
import Glibc
import Synchronization

/// Tuning of the HTTP transport.
package struct HTTPServerOptions: Sendable {
    /// Where to listen.
    package var address: ListenAddress
    /// Worker threads in libmicrohttpd's pool; each runs one request at a time.
    package var threadPoolSize: Int = defaultThreadPoolSize(writesBlockUntilDurable: false)

    /// The default pool: one thread per core (at least 2) when the storage's writes wait for
    /// durability without a thread (SQLite), else 32 (PostgreSQL).
    ///
    /// With SQLite a worker never waits for the disk: a response that depends on a write not
    /// yet durable is held with its connection suspended (``DurabilityScope``), and the worker
    /// serves other connections meanwhile. A worker then only waits for the CPU, and more
    /// workers than cores would only add thread switches: each worker polls its own share of
    /// the connections, so with as many workers as connections every request woke a thread of
    /// its own. Measured on 2 cores: `/.well-known/jwks.json` at 24,000 requests/s with 32
    /// threads and 60,000 with 2. At least 2, so that one request that does block (a `BEGIN`
    /// waiting for another process's lock) does not stop the server.
    ///
    /// PostgreSQL's calls block their thread for a round trip and its commit's WAL flush, so
    /// only requests with a thread each can share the server's CPU: 32, as measured before,
    /// where 4 threads left the server bound by the waits and 16 to 64 measured alike.
    package static func defaultThreadPoolSize(writesBlockUntilDurable: Bool) -> Int {
        writesBlockUntilDurable ? 32 : max(2, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    }
    /// Simultaneous connections served. From three quarters of it on, the server is under
    /// pressure and keeps the rest for addresses within their fair share; at it, a newcomer within
    /// its share takes the slot of an idle connection of the greediest address, and others are
    /// closed at once (``ConnectionShares``). With no per-address limit, more wait in the
    /// listening socket's queue.
    package var connectionLimit: Int = 1000
    /// Simultaneous connections accepted from one IP address, or one IPv6 /64 (0: no limit), so
    /// that one client cannot take every slot of ``connectionLimit``; more are refused at accept
    /// time. Under pressure an eighth of it is the address's fair share (none with no limit).
    package var connectionsPerAddressLimit: Int = defaultConnectionsPerAddressLimit
    /// 32: more than a client library or a benchmark opens to one server.
    package static let defaultConnectionsPerAddressLimit = 32
    /// Seconds a connection may stay idle (keep-alive or a stalled upload) before it is closed.
    ///
    /// 10 rather than libmicrohttpd's custom of minutes: every keyauth client sends its request
    /// as soon as it connects, so a connection quiet for 10 s only holds a slot. The request
    /// deadline closes a quiet keep-alive connection at the same age; this timeout still bounds
    /// a client that stops reading its response.
    package var connectionTimeoutSeconds: Int = defaultConnectionTimeoutSeconds
    /// See ``connectionTimeoutSeconds``.
    package static let defaultConnectionTimeoutSeconds = 10
    /// Seconds a connection has to deliver each complete request (head and body), counted from
    /// its start or from the previous response, however it trickles its bytes (see
    /// ``RequestDeadlines``).
    package var requestTimeoutSeconds: Int = defaultRequestTimeoutSeconds
    /// 10: a login or registration is a few kilobytes, sent in milliseconds even on a poor link.
    package static let defaultRequestTimeoutSeconds = 10
    /// The slowest a client may read a response and keep its connection: the request timeout
    /// for taking a response starts after the time its size needs at this rate.
    package var slowestReadingBytesPerSecond: Int = defaultSlowestReadingBytesPerSecond
    /// 16 KiB/s, a poor mobile link: a large answer (the SSH revocation list of a big
    /// deployment, 2 MB at 20,000 revoked devices) still reaches a host on it, where a reset
    /// would leave the host trusting revoked keys.
    package static let defaultSlowestReadingBytesPerSecond = 16 * 1024
    /// The largest request body accepted (PROTOCOL.md section 4: 64 KiB, else 413).
    package var maximumBodySize: Int = 64 * 1024
    /// Bytes of a too-large chunked body the transport reads and drops before it gives up on the
    /// connection instead of answering 413, so a client cannot stream forever.
    package var maximumDiscardedBytes: Int = 1024 * 1024
    /// Seconds shutdown waits for requests in progress before closing connections anyway.
    package var drainTimeoutSeconds: Int = 10

    /// Options with defaults for everything but the address.
    package init(address: ListenAddress) {
        self.address = address
    }
}

/// The HTTP server: libmicrohttpd with its internal epoll thread pool, turning requests into
/// ``HTTPRequest`` values for an ``HTTPResponder``.
///
/// libmicrohttpd owns the sockets, keep-alive, request parsing, connection limits (in total and
/// per full address) and the idle timeout; this class owns the daemon, the callbacks' shared
/// context, and what libmicrohttpd lacks: the request deadline and the counts by IPv4 address or
/// IPv6 /64 (``RequestDeadlines``, ``ConnectionShares``). The 64 KiB body limit is
/// enforced while the body arrives (see `HTTPServer+Callbacks.swift`).
package final class HTTPServer: Sendable {
    private let daemon: MicroHTTPDaemon
    private let context: HTTPServerContext
    private let drainTimeoutSeconds: Int

    /// The bound port (the kernel's choice when the options asked for port 0).
    package let port: UInt16
    /// The bound address.
    package let address: ListenAddress

    /// Starts listening and serving at once.
    ///
    /// - Throws: ``HTTPServerError`` when the address cannot be bound or the daemon fails.
    package init(responder: any HTTPResponder, options: HTTPServerOptions) throws(HTTPServerError) {
        let shares = ConnectionShares(
            limit: max(options.connectionLimit, 1), perAddressLimit: max(options.connectionsPerAddressLimit, 0))
        let context = HTTPServerContext(
            responder: responder, maximumBodySize: options.maximumBodySize,
            maximumDiscardedBytes: options.maximumDiscardedBytes,
            deadlines: RequestDeadlines(
                timeoutSeconds: options.requestTimeoutSeconds, shares: shares,
                slowestReadingBytesPerSecond: options.slowestReadingBytesPerSecond))
        // Retained for the daemon's lifetime: its threads may call back until MHD_stop_daemon
        // returns; released in `stop`/`deinit` after that.
        let contextPointer = Unmanaged.passRetained(context).toOpaque()
        // Suspending connections needs MHD_USE_ITC too, so that a resume wakes the worker at
        // once (MHD_ALLOW_SUSPEND_RESUME includes it).
        var flags =
            MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
        if options.address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        let started = options.address.withSocketAddress { socketAddress in
            ckeyauth_mhd_start_daemon(
                UInt32(flags), socketAddress, httpServerAcceptPolicy, contextPointer,
                UInt32(max(options.threadPoolSize, 1)),
                // The limit and the headroom in which the accept policy makes room at the limit.
                UInt32(shares.socketLimit), UInt32(max(options.connectionsPerAddressLimit, 0)),
                UInt32(max(options.connectionTimeoutSeconds, 1)),
                // Per-connection buffer for headers and body chunks; the body is copied out in
                // chunks, so this bounds memory per connection, not the body size.
                32 * 1024, httpServerAccessHandler, contextPointer, httpServerRequestCompleted, contextPointer,
                httpServerConnectionNotice, contextPointer, httpServerRawTarget, contextPointer)
        }
        guard let started else {
            context.deadlines.cancel()
            Unmanaged<HTTPServerContext>.fromOpaque(contextPointer).release()
            throw HTTPServerError(address: options.address, reason: ListenProbe.reason(options.address))
        }
        self.daemon = MicroHTTPDaemon(taking: started)
        self.context = context
        self.drainTimeoutSeconds = options.drainTimeoutSeconds
        let bound = ckeyauth_mhd_bound_port(started)
        self.port = bound == 0 ? options.address.port : bound
        self.address = options.address
    }

    deinit {
        stop()
    }

    /// Connections currently open.
    package var openConnections: Int {
        context.deadlines.count
    }

    /// What the listener refused and shut down so far, and its connections open now, for
    /// `/metrics`.
    package var connectionFigures: ConnectionFigures {
        context.deadlines.figures
    }

    /// Requests currently being received or answered, held responses included.
    package var requestsInProgress: Int {
        context.inFlight.load(ordering: .relaxed)
    }

    /// Whether new connections are served; false from the moment ``stop()`` begins.
    package var isAcceptingConnections: Bool {
        context.accepting.load(ordering: .relaxed)
    }

    /// Responses currently held, their connections suspended, until their data is durable.
    package var heldResponses: Int {
        context.holdResponses.count
    }

    /// Stops gracefully: closes new connections at once, unanswered, lets requests in progress
    /// finish (up to the drain timeout; held responses go out as their data becomes durable), then
    /// answers the responses still held with 503, closes every connection and the listening
    /// socket, and joins the worker threads.
    ///
    /// Idempotent and safe to call from any thread but a worker's.
    package func stop() {
        daemon.stop(
            drainingUntil: ServerClock.monotonicNanoseconds() + UInt64(max(drainTimeoutSeconds, 0)) * 1_000_000_000
        ) {
            context.accepting.store(false, ordering: .sequentiallyConsistent)
        } releasingWaits: {
            context.holdResponses.releaseWaits(
                failure: StorageError(.unavailable, "the server is shutting down"),
                answer: { context.responder.failure($0, at: $1) })
        } inFlight: {
            context.inFlight.load(ordering: .acquiring)
        } releasingHeld: {
            context.holdResponses.releaseAll(
                failure: StorageError(.unavailable, "the server is shutting down"),
                answer: { context.responder.failure($0, at: $1) })
        } onStopped: {
            context.deadlines.cancel()
            // Balances the `passRetained` of `init`: no callback can run any more.
            Unmanaged.passUnretained(context).release()
        }
    }
}

/// The one owner of an `MHD_Daemon`.
///
/// `@unchecked Sendable`: the pointer is only passed to libmicrohttpd functions that are
/// thread-safe, and stopping (which is not reentrant) happens once, under the mutex.
final class MicroHTTPDaemon: @unchecked Sendable {
    private let pointer: OpaquePointer
    private let running = Mutex(true)

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        stop(
            drainingUntil: 0, closingToNewConnections: {}, releasingWaits: { 0 }, inFlight: { 0 },
            releasingHeld: { 0 }, onStopped: {})
    }

    /// Has `closingToNewConnections` make the accept policy close new connections, has
    /// `releasingWaits` answer the connections that wait for nothing but time (long polls), waits
    /// until `inFlight` reaches zero or the monotonic `deadline` passes, then has `releasingHeld`
    /// resume every suspended connection (it returns how many), gives the workers up to a second
    /// to answer those, and stops the daemon, which closes the remaining connections and joins
    /// its threads. libmicrohttpd must not be stopped with a connection suspended.
    func stop(
        drainingUntil deadline: UInt64, closingToNewConnections: () -> Void, releasingWaits: () -> Int,
        inFlight: () -> Int, releasingHeld: () -> Int, onStopped: () -> Void
    ) {
        running.withLock { running in
            guard running else { return }
            running = false
            // Not MHD_quiesce_daemon: in libmicrohttpd 0.9.75 it races with a worker that wakes
            // at the same moment (both take the listening socket out of the worker's epoll set,
            // and the loser aborts the process), and its socket must stay open until the daemon
            // stops, because workers may still use it. The accept policy closes new
            // connections instead, and MHD_stop_daemon closes the socket when nothing uses it.
            closingToNewConnections()
            _ = releasingWaits()
            while inFlight() > 0, ServerClock.monotonicNanoseconds() < deadline {
                usleep(10_000)
            }
            if releasingHeld() > 0 {
                let grace = ServerClock.monotonicNanoseconds() + 1_000_000_000
                while inFlight() > 0, ServerClock.monotonicNanoseconds() < grace { usleep(10_000) }
            }
            MHD_stop_daemon(pointer)
            onStopped()
        }
    }
}

/// What every callback of one daemon shares.
final class HTTPServerContext: Sendable {
    let responder: any HTTPResponder
    let maximumBodySize: Int
    let maximumDiscardedBytes: Int
    /// Requests between their first callback and their completion notice.
    let inFlight = Atomic<Int>(0)
    /// Whether new connections are served (``httpServerAcceptPolicy``); false once stopping.
    let accepting = Atomic<Bool>(true)
    /// The open connections: their request deadlines and their counts by address.
    let deadlines: RequestDeadlines
    /// Responses waiting for durability with their connections suspended.
    let holdResponses = HeldResponses()

    init(
        responder: any HTTPResponder, maximumBodySize: Int, maximumDiscardedBytes: Int, deadlines: RequestDeadlines
    ) {
        self.responder = responder
        self.maximumBodySize = maximumBodySize
        self.maximumDiscardedBytes = maximumDiscardedBytes
        self.deadlines = deadlines
    }
}
