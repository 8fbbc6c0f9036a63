import Synchronization

/// A clock that tests move by hand (pending expiry, code expiry, rate-limit windows, token
/// expiry) instead of sleeping.
final class TestClock: Sendable {
    private let seconds: Atomic<Int64>

    init(_ start: Int64 = 1_800_000_000) {
        seconds = Atomic(start)
    }

    /// The current test time.
    var now: Int64 { seconds.load(ordering: .relaxed) }

    /// The clock as the closure the server takes.
    var closure: @Sendable () -> Int64 {
        { [self] in self.now }
    }

    /// Moves time forward.
    func advance(by delta: Int64) {
        seconds.add(delta, ordering: .relaxed)
    }
}
