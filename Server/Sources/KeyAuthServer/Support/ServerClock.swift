import Glibc

/// The server's time source: whole seconds since 1970, the unit of JWT claims.
///
/// Components take a `now` closure defaulting to ``now()`` so that tests can move time (for
/// pending expiry, code expiry, rate-limit windows) without sleeping.
public enum ServerClock {
    /// The current time in seconds since 1970 (UTC).
    public static func now() -> Int64 {
        Int64(time(nil))
    }

    /// A monotonic time in nanoseconds, for measuring durations immune to clock changes.
    public static func monotonicNanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }

    /// `seconds` as RFC 3339 UTC (`2024-05-01T12:00:00Z`), the format of PROTOCOL.md section 4.
    public static func rfc3339(_ seconds: Int64) -> String {
        var value = time_t(seconds)
        var parts = tm()
        gmtime_r(&value, &parts)
        func pad(_ number: Int32, _ width: Int) -> String {
            let text = String(number)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))Z"
    }
}
