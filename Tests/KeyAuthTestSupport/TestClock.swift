import KeyAuth
import Synchronization

/// A clock that tests move by hand (PIN delays, pending expiry, code expiry, rate-limit windows,
/// token expiry) instead of sleeping.
public final class TestClock: Sendable {
    private let seconds: Atomic<Int64>

    public init(_ start: Int64 = 1_800_000_000) {
        seconds = Atomic(start)
    }

    /// The current test time, in seconds since 1970.
    public var now: Int64 { seconds.load(ordering: .relaxed) }

    /// The clock as the closure the server takes.
    public var closure: @Sendable () -> Int64 {
        { [self] in self.now }
    }

    /// The clock as the library takes it.
    public var clock: KeyAuthClock {
        .seconds { [self] in self.now }
    }

    /// Moves time forward.
    public func advance(by delta: Int64) {
        seconds.add(delta, ordering: .relaxed)
    }
}
