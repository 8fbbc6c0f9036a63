import Glibc

/// The server's time source: whole seconds since 1970, the unit of JWT claims.
///
/// Components take a `now` closure defaulting to ``now()`` so that tests can move time (for
/// pending expiry, code expiry, rate-limit windows) without sleeping.
package enum ServerClock {
    /// The current time in seconds since 1970 (UTC).
    package static func now() -> Int64 {
        Int64(time(nil))
    }

    /// A monotonic time in nanoseconds, for measuring durations immune to clock changes.
    package static func monotonicNanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }

    /// Nanoseconds from `start` to `end`, or 0 when `end` is the earlier reading.
    ///
    /// Two readings taken on different threads can arrive in either order (one thread reads
    /// the clock, another stores a later reading before the first compares), and an unsigned
    /// `end - start` below zero is a trap that ends the whole server. Every duration between
    /// readings that did not come from one thread in order goes through here.
    package static func nanoseconds(from start: UInt64, to end: UInt64) -> UInt64 {
        end >= start ? end - start : 0
    }
}
