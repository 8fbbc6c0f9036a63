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
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20)
        append(fromSeconds: seconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends what ``string(fromSeconds:)`` returns to `bytes`, without a string in between:
    /// every request's log line starts with its time.
    package static func append(fromSeconds seconds: Int64, to bytes: inout [UInt8]) {
        var value = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&value, &parts) != nil else {
            bytes.append(contentsOf: String(seconds).utf8)
            return
        }
        // In `Int`: glibc breaks down times up to the year 2,147,485,547, whose `tm_year` is
        // within `Int32` while the year itself is not, and a stored time that far out (a damaged
        // row) must print, not trap.
        appendPadded(Int(parts.tm_year) + 1900, width: 4, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        appendPadded(Int(parts.tm_mon) + 1, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        appendPadded(Int(parts.tm_mday), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "T"))
        appendPadded(Int(parts.tm_hour), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        appendPadded(Int(parts.tm_min), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        appendPadded(Int(parts.tm_sec), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "Z"))
    }

    /// `number` in decimal after as many zeros as bring it to `width` characters. The digits
    /// of any year `tm` holds fit in a small string, which needs no allocation.
    private static func appendPadded(_ number: Int, width: Int, to bytes: inout [UInt8]) {
        let digits = String(number).utf8
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: max(0, width - digits.count)))
        bytes.append(contentsOf: digits)
    }
}
