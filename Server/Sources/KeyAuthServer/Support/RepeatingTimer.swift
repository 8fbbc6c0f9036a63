import Dispatch
import Synchronization

/// Runs `action` every `intervalSeconds` on a background queue until cancelled: the periodic
/// cleanup of expired rows, and the sweep that enforces the request deadline.
final class RepeatingTimer: Sendable {
    private let timer: Mutex<DispatchSourceTimer?>

    /// Starts the timer; the first run is one interval from now.
    ///
    /// - Parameter leewayMilliseconds: how late a run may be, which lets the system batch
    ///   wake-ups.
    init(intervalSeconds: Int, leewayMilliseconds: Int = 1000, action: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue.global(qos: .utility))
        let interval = DispatchTimeInterval.seconds(max(intervalSeconds, 1))
        source.schedule(
            deadline: .now() + interval, repeating: interval, leeway: .milliseconds(max(leewayMilliseconds, 0)))
        source.setEventHandler(handler: action)
        source.resume()
        timer = Mutex(source)
    }

    func cancel() {
        timer.withLock { timer in
            timer?.cancel()
            timer = nil
        }
    }

    deinit {
        cancel()
    }
}
