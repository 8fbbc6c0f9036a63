import Synchronization

/// Where `serve` is between its start and its stop, shared by the main thread, the signal
/// watcher (``ServeSignals``) and the grace timer, so that each stop signal means one thing.
///
/// A signal during the start interrupts it: the start stops at the end of its current step and
/// undoes what it did (``ServerRunner/StartInterrupted``), so that it never leaves a database
/// half made. A step that does not end within ``interruptedStartGrace`` seconds (a database that
/// does not answer), or a second signal, ends the process at once, where it is: an operator who
/// insists gets the stop without waiting.
final class ServeLifecycle: Sendable {
    /// Seconds a start has, after a stop signal, to end its step and undo itself.
    static let interruptedStartGrace = 10

    private enum State {
        case starting
        /// A signal came during the start; the start has not ended yet.
        case interrupted
        /// Started, and no signal came before: a signal now stops the server.
        case serving
        /// The start ended after a signal: the main thread undoes or stops it.
        case ending
        /// The process is ending at once (a second signal, or the grace ran out).
        case abandoned
    }

    /// What a stop signal means now.
    enum Reaction {
        /// The first during the start: the start stops at its next step; end the process if it
        /// has not after ``ServeLifecycle/interruptedStartGrace`` seconds (``abandon()``).
        case interruptStart
        /// A second during the start: end the process now.
        case exitNow
        /// While serving: stop gracefully.
        case stop
        /// The stop is under way already.
        case ignore
    }

    private let state = Mutex(State.starting)

    /// Whether a signal came during the start, asked by the start between its steps.
    var isInterrupted: Bool { state.withLock { $0 == .interrupted } }

    /// Records a stop signal and says what it means.
    func signalReceived() -> Reaction {
        state.withLock { state in
            switch state {
            case .starting:
                state = .interrupted
                return .interruptStart
            case .interrupted:
                state = .abandoned
                return .exitNow
            case .serving: return .stop
            case .ending, .abandoned: return .ignore
            }
        }
    }

    /// Records that the start ended (started or failed).
    ///
    /// - Returns: true when no signal came during it, so the server may serve; false when one
    ///   did, and the caller stops what started instead.
    func startEnded() -> Bool {
        state.withLock { state in
            switch state {
            case .starting:
                state = .serving
                return true
            case .interrupted:
                state = .ending
                return false
            case .serving, .ending, .abandoned: return false
            }
        }
    }

    /// For the grace timer: whether the interrupted start is still running, in which case the
    /// caller ends the process.
    func abandon() -> Bool {
        state.withLock { state in
            guard state == .interrupted else { return false }
            state = .abandoned
            return true
        }
    }
}
