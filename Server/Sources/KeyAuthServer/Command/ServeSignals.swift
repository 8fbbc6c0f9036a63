import Dispatch
import Glibc
import KeyAuth
import Synchronization

/// SIGTERM, SIGINT and SIGHUP for `serve`, caught with `sigaction` from the first instruction
/// of the command and handed to a thread of their own through a semaphore. SIGHUP (a closed
/// terminal, or an operator's habit of asking daemons to reload) stops the server as the others
/// do: by default it would end the process at once, without the drain or the replay set's
/// snapshot, and during a start leave a half-made database. A SIGHUP ignored when the server
/// starts (`nohup`) stays ignored.
///
/// A libdispatch signal source is not used: on Linux it installs its handler from its manager
/// thread a moment after `resume()`, and under load that moment came after `serve` had created
/// the database, so a SIGTERM then took the default action and left a half-made database behind
/// (a file without tables, which the admin commands call "still being created" for ever). A
/// `sigaction` handler is in place when ``install(_:)`` returns. The handler itself only posts a
/// semaphore (``SignalSemaphore``); the watcher thread calls the Swift handler, once per signal,
/// in ordinary context, where it may take locks and write. The handlers stay for the process's
/// life: `serve` is the last thing the process does, and a signal during its exit still finds
/// one rather than the default action's exit 143.
enum ServeSignals {
    /// The address of the semaphore the handler posts (``SignalSemaphore``), 0 before
    /// installation.
    private static let semaphoreAddress = Atomic<UInt>(0)

    /// The signals that stop `serve`.
    static let stopSignals = [SIGTERM, SIGINT, SIGHUP]

    /// Installs the handler for ``stopSignals`` and calls `handle` on a thread of its own for
    /// each one that arrives.
    ///
    /// - Returns: false when the semaphore or a handler cannot be set up; the signals then keep
    ///   (or get back) their default action, which ends the process.
    static func install(_ handle: @escaping @Sendable () -> Void) -> Bool {
        guard let address = SignalSemaphore.make() else { return false }
        semaphoreAddress.store(address, ordering: .releasing)
        // A serial queue of its own: the one thread it takes waits here for the process's life.
        DispatchQueue(label: "keyauth-server.signals").async {
            while SignalSemaphore.wait(address) {
                handle()
            }
        }
        // A SIGHUP that the server was started to ignore (`nohup`) stays ignored.
        let caught = stopSignals.filter { $0 != SIGHUP || !isIgnored(SIGHUP) }
        for number in caught {
            var action = sigaction()
            action.__sigaction_handler = .init(sa_handler: serveSignalHandler)
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            guard sigaction(number, &action, nil) == 0 else {
                for installed in caught { signal(installed, SIG_DFL) }
                return false
            }
        }
        return true
    }

    /// Whether signal `number` is ignored, as `nohup` leaves SIGHUP for the program it starts.
    private static func isIgnored(_ number: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0, let handler = current.__sigaction_handler.sa_handler else {
            return false
        }
        return unsafeBitCast(handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// The handler's half: an atomic load and `sem_post`.
    fileprivate static func received() {
        SignalSemaphore.post(semaphoreAddress.load(ordering: .acquiring))
    }
}

/// The C signal handler; a global function, since it runs on whichever thread takes the signal
/// and must never be main-actor isolated.
private func serveSignalHandler(_ number: Int32) {
    let savedErrno = errno
    ServeSignals.received()
    errno = savedErrno
}
