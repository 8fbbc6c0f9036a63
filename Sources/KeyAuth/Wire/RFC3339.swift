#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Times as the protocol writes them: RFC 3339 in UTC with whole seconds
/// (`2024-05-01T12:00:00Z`, PROTOCOL.md section 4).
///
/// Computed with `gmtime_r`: `ISO8601DateFormatter` would load ICU's time-zone data on every run,
/// a measurable share of a `keyauth login` that otherwise takes a few tens of milliseconds.
package enum RFC3339 {
    /// `seconds` since 1970 as RFC 3339 UTC; the plain number when the C library cannot break it
    /// down (a year beyond what `tm` holds).
    package static func string(fromSeconds seconds: Int64) -> String {
        var value = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&value, &parts) != nil else { return String(seconds) }
        func pad(_ number: Int32, _ width: Int) -> String {
            let digits = String(number)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return pad(parts.tm_year + 1900, 4) + "-" + pad(parts.tm_mon + 1, 2) + "-" + pad(parts.tm_mday, 2) + "T"
            + pad(parts.tm_hour, 2) + ":" + pad(parts.tm_min, 2) + ":" + pad(parts.tm_sec, 2) + "Z"
    }
}
