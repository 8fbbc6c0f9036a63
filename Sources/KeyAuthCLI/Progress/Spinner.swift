import Synchronization

/// A one-line spinner on a terminal, redrawn in place until stopped.
///
/// Frames and the final erase are written under one lock with a generation number, so that a
/// frame of an old spinner can never land after ``stop()`` has cleared the line.
final class Spinner: Sendable {
    private struct State {
        var generation = 0
        var task: Task<Void, Never>?
    }

    private static let frames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
    private let write: @Sendable (String) -> Void
    private let state = Mutex(State())

    /// - Parameter write: writes to the terminal (standard error).
    init(write: @escaping @Sendable (String) -> Void) {
        self.write = write
    }

    /// Shows `message` with a turning wheel, replacing any spinner shown before.
    func start(_ message: String) {
        let generation = state.withLock { state in
            state.generation += 1
            state.task?.cancel()
            state.task = nil
            return state.generation
        }
        let task = Task { [self] in
            var frame = 0
            while !Task.isCancelled {
                let shown = state.withLock { state in
                    guard state.generation == generation else { return false }
                    write("\r\u{1B}[K\(Self.frames[frame % Self.frames.count]) \(message)")
                    return true
                }
                guard shown else { return }
                frame += 1
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        state.withLock { state in
            if state.generation == generation { state.task = task } else { task.cancel() }
        }
    }

    /// Stops the spinner and erases its line; does nothing when none is shown.
    func stop() {
        state.withLock { state in
            state.generation += 1
            guard let task = state.task else { return }
            task.cancel()
            state.task = nil
            write("\r\u{1B}[K")
        }
    }
}
