import Foundation
import KeyAuth
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// SIGINT, SIGTERM and SIGHUP for the `keyauth` binary, caught with `sigaction` and handed to a
/// thread of their own through a semaphore.
///
/// A libdispatch signal source is not used: on Linux it forwards each signal to the thread that
/// first registered a source, and once that worker thread has exited (its `pthread_t` possibly
/// reused by a thread that blocks the signal, such as a prompt's) the signal stays pending and
/// is never seen. A `sigaction` handler runs on whichever thread takes the signal.
///
/// The handler does only async-signal-safe work: when a terminal prompt is waiting, it puts the
/// terminal's settings back, ends the line and exits at once (`_exit`), since the prompt's
/// thread is blocked in `read(2)` where no cancellation reaches; a second stopping signal also
/// exits at once, with the first one's status. Otherwise it keeps the first signal in an atomic
/// and posts a semaphore (`sem_post` is async-signal-safe), and the waiting thread calls the
/// Swift handler in ordinary context. A pipe did this before, but a descriptor can be closed
/// under its owner by code elsewhere in the process that closes a number twice (libcurl's
/// sockets under URLSession are known to, swift-corelibs-foundation issue 3286): the reading
/// thread then ended, and Control-C was ignored for good. Memory cannot be taken away like that.
enum StopSignals {
    /// The address of the semaphore the handler posts, 0 before installation (an integer, which
    /// an atomic holds and a handler reads safely). Allocated once and never freed, since a
    /// handler may run at any moment until the process ends.
    private static let semaphoreAddress = Atomic<UInt>(0)
    /// The first stopping signal received, 0 before any: the one handed on, and whose status a
    /// second signal exits with.
    private static let firstSignal = Atomic<Int32>(0)

    /// The first stopping signal received, nil before any.
    static var first: Int32? {
        let number = firstSignal.load(ordering: .acquiring)
        return number == 0 ? nil : number
    }

    /// Installs the handler for `signals` and calls `handle` once, with the first one that
    /// arrives and is not settled by a waiting prompt. Any later one ends the process.
    ///
    /// - Returns: false when the semaphore or the handler cannot be set up; the signals then keep
    ///   their default dispositions.
    static func install(_ signals: [Int32], handle: @escaping @Sendable (Int32) -> Void) -> Bool {
        guard let address = SignalSemaphore.make() else { return false }
        semaphoreAddress.store(address, ordering: .releasing)
        // Sets up the prompt's saved-state storage now, so that the handler never runs Swift's
        // one-time initialisation of a global.
        TerminalSecretReader.prepareForSignalHandlers()
        let watching = DetachedThread.start(name: "keyauth-signals") {
            guard SignalSemaphore.wait(address) else { return }
            handle(firstSignal.load(ordering: .acquiring))
        }
        guard watching else { return false }
        for number in signals {
            var action = sigaction()
            action.__sigaction_handler = .init(sa_handler: stopSignalHandler)
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            guard sigaction(number, &action, nil) == 0 else { return false }
        }
        return true
    }

    /// The handler's half: only atomics, `tcsetattr`, `write`, `sem_post` and `_exit`.
    fileprivate static func received(_ number: Int32) {
        if TerminalSecretReader.restoreTerminalAfterInterrupt() {
            _exit(KeyAuthCommand.status(afterSignal: number))
        }
        let address = semaphoreAddress.load(ordering: .acquiring)
        guard number > 0, address != 0 else { return }
        let (isFirst, first) = firstSignal.compareExchange(
            expected: 0, desired: number, ordering: .acquiringAndReleasing)
        // A second stopping signal ends the process here rather than through the watcher thread,
        // which may be the very thing stuck in handling the first.
        if !isFirst { _exit(KeyAuthCommand.status(afterSignal: first)) }
        SignalSemaphore.post(address)
    }
}

/// The C signal handler; a global function, since a closure literal would not be `@convention(c)`
/// without care and must never be main-actor isolated.
private func stopSignalHandler(_ number: Int32) {
    let savedErrno = errno
    StopSignals.received(number)
    errno = savedErrno
}
