import Glibc
import KeyAuth
import KeyAuthArguments

/// `keyauth-server audit [--since DURATION|TIME]`: the audit trail, oldest first.
extension ServerCommand {
    /// Where `audit` starts.
    package enum AuditStart: Sendable, Equatable {
        /// This many seconds before now (`--since 24h`).
        case ago(Int64)
        /// This time, in seconds since 1970 (`--since 2026-12-01T00:00:00Z`).
        case time(Int64)

        /// Parses a duration in the syntax of every duration option (``DurationText``: `90`,
        /// `30m`, `1h30m`, `7d`), up to 100 years, or an RFC 3339 UTC time
        /// (`2026-12-01T08:00:00Z`) or date (`2026-12-01`).
        ///
        /// - Throws: ``ServerConfigurationError`` naming `--since`.
        init(parsing text: String) throws(ServerConfigurationError) {
            // A 4-digit number is a duration in seconds, never a year: a date has dashes.
            if let seconds = DurationText.seconds(text), seconds <= 36_500 * 86_400 {
                self = .ago(seconds)
                return
            }
            guard let seconds = Self.utcSeconds(text) else {
                throw ServerConfigurationError(
                    "--since: expected a duration (90, 90s, 30m, 1h30m, 7d) or a UTC time (2026-12-01T08:00:00Z or "
                        + "2026-12-01), got \(text)")
            }
            self = .time(seconds)
        }

        /// The start in seconds since 1970, given the time now.
        func seconds(now: Int64) -> Int64 {
            switch self {
            case .ago(let seconds): now - seconds
            case .time(let seconds): seconds
            }
        }

        /// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SSZ` as seconds since 1970, or nil.
        private static func utcSeconds(_ text: String) -> Int64? {
            let characters = Array(text)
            let pattern = Array(characters.count == 10 ? "dddd-dd-dd" : "dddd-dd-ddTdd:dd:ddZ")
            guard characters.count == pattern.count,
                zip(characters, pattern).allSatisfy({ $1 == "d" ? ("0"..."9").contains($0) : $0 == $1 })
            else { return nil }
            func number(_ range: Range<Int>) -> Int32 {
                Int32(String(characters[range])) ?? 0
            }
            var parts = tm()
            parts.tm_year = number(0..<4) - 1900
            parts.tm_mon = number(5..<7) - 1
            parts.tm_mday = number(8..<10)
            if text.count == 20 {
                parts.tm_hour = number(11..<13)
                parts.tm_min = number(14..<16)
                parts.tm_sec = number(17..<19)
            }
            guard (0...11).contains(parts.tm_mon), (1...31).contains(parts.tm_mday), (0...23).contains(parts.tm_hour),
                (0...59).contains(parts.tm_min), (0...60).contains(parts.tm_sec)
            else { return nil }
            return Int64(timegm(&parts))
        }
    }

    /// `audit [--json]`: the events since `start` (all when nil) in aligned columns, the detail
    /// last as it may hold spaces, or as one JSON array.
    static func audit(since start: AuditStart?, json: Bool, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let time = start?.seconds(now: ServerClock.now()) ?? Int64.min
            var listing = Listing(
                ["time", "action", "actor", "user", "subject", "detail"].map { ($0.uppercased(), $0) })
            for event in try AuditTrail(storage: storage).events(since: time) {
                listing.append([
                    .time(event.time), .text(event.action.rawValue), .text(event.actor), .optional(event.user),
                    .optional(event.subject), .optional(event.detail),
                ])
            }
            listing.write(json: json, to: output)
        }
    }
}
