import Foundation
import KeyAuth
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// SIGINT, SIGTERM and SIGHUP for the `keyauth` binary, caught with `sigaction` and a pipe.
///
/// A libdispatch signal source is not used: on Linux it forwards each signal to the thread that
/// first registered a source, and once that worker thread has exited (its `pthread_t` possibly
/// reused by a thread that blocks the signal, such as a prompt's) the signal stays pending and
/// is never seen. A `sigaction` handler runs on whichever thread takes the signal.
///
/// The handler does only async-signal-safe work: when a terminal prompt is waiting, it puts the
/// terminal's settings back, ends the line and exits at once (`_exit`), since the prompt's
/// thread is blocked in `read(2)` where no cancellation reaches; otherwise it writes the signal's
/// number to a pipe, and a thread reading that pipe calls the Swift handler in ordinary context.
enum StopSignals {
    /// The write end of the pipe, read by the signal handler; -1 before installation.
    private static let pipeWriteEnd = Atomic<Int32>(-1)

    /// Installs the handler for `signals` and calls `handle` with each one that arrives and is
    /// not settled by a waiting prompt.
    ///
    /// - Returns: false when the pipe or the handler cannot be set up; the signals then keep
    ///   their default dispositions.
    static func install(_ signals: [Int32], handle: @escaping @Sendable (Int32) -> Void) -> Bool {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return false }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let readEnd = ends[0]
        pipeWriteEnd.store(ends[1], ordering: .releasing)
        // Sets up the prompt's saved-state storage now, so that the handler never runs Swift's
        // one-time initialisation of a global.
        TerminalSecretReader.prepareForSignalHandlers()
        let watcher = Thread {
            var byte: UInt8 = 0
            while true {
                let count = read(readEnd, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                guard count == 1 else { return }
                handle(Int32(byte))
            }
        }
        watcher.name = "keyauth-signals"
        watcher.start()
        for number in signals {
            var action = sigaction()
            action.__sigaction_handler = .init(sa_handler: stopSignalHandler)
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            guard sigaction(number, &action, nil) == 0 else { return false }
        }
        return true
    }

    /// The handler's half: only atomics, `tcsetattr`, `write` and `_exit`.
    fileprivate static func received(_ number: Int32) {
        if TerminalSecretReader.restoreTerminalAfterInterrupt() {
            _exit(KeyAuthCommand.status(afterSignal: number))
        }
        var byte = UInt8(truncatingIfNeeded: number)
        _ = write(pipeWriteEnd.load(ordering: .acquiring), &byte, 1)
    }
}

/// The C signal handler; a global function, since a closure literal would not be `@convention(c)`
/// without care and must never be main-actor isolated.
private func stopSignalHandler(_ number: Int32) {
    let savedErrno = errno
    StopSignals.received(number)
    errno = savedErrno
}
