import Foundation

/// How times are shown: RFC 3339 UTC, as the server writes them.
enum Formatting {
    /// RFC 3339 in UTC (`2026-11-29T15:28:01Z`), computed with `gmtime_r`.
    ///
    /// `ISO8601DateFormatter` would load ICU's time-zone data on every run, a measurable share
    /// of a `keyauth login` that otherwise takes a few tens of milliseconds.
    static func timestamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return String(Int64(seconds)) }
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return pad(parts.tm_year + 1900, 4) + "-" + pad(parts.tm_mon + 1, 2) + "-" + pad(parts.tm_mday, 2) + "T"
            + pad(parts.tm_hour, 2) + ":" + pad(parts.tm_min, 2) + ":" + pad(parts.tm_sec, 2) + "Z"
    }

    /// Text from the server as it may go to a terminal: control characters (escape sequences
    /// that could rewrite the screen) become `?`. An address the server saw may come from a
    /// client's `X-Forwarded-For`, so it is anyone's text.
    static func printable(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) ? "?" : $0 }))
    }

    static func duration(_ seconds: TimeInterval) -> String {
        let total = Int(seconds.rounded(.down))
        if total < 60 { return "\(total) s" }
        if total < 3600 { return "\(total / 60) min" }
        return "\(total / 3600) h \(total % 3600 / 60) min"
    }
}
