import Foundation
import KeyAuth

/// How times are shown: RFC 3339 UTC, as the server writes them.
enum Formatting {
    /// RFC 3339 in UTC (`2026-11-29T15:28:01Z`), whole seconds rounded down.
    static func timestamp(_ date: Date) -> String {
        RFC3339.string(fromSeconds: Int64(clampingSeconds: date.timeIntervalSince1970))
    }

    /// A time of day for a person to compare with their clock: `HH:MM:SS` in `timeZone` (the
    /// local one by default) followed by the zone's abbreviation, such as `14:05:09 CET`.
    static func clockTime(_ date: Date, timeZone: TimeZone = .current) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.hour, .minute, .second], from: date)
        let clock = [parts.hour, parts.minute, parts.second].map { value in
            let number = value ?? 0
            return number < 10 ? "0\(number)" : "\(number)"
        }.joined(separator: ":")
        guard let zone = timeZone.abbreviation(for: date) else { return clock }
        return clock + " " + zone
    }

    /// Text from the server as it may go to a terminal: control characters (escape sequences
    /// that could rewrite the screen) become `?`, and so do format and invisible characters (a
    /// right-to-left override would reverse the rest of the line), and combining marks beyond
    /// the name rule's few in a row are left out. An address the server saw may come from a
    /// client's `X-Forwarded-For`, and a name stored before the server checked names as
    /// PROTOCOL.md section 4 says may hold anything, so this is anyone's text.
    static func printable(_ text: String) -> String {
        var shown = String.UnicodeScalarView()
        var marks = 0
        for scalar in text.unicodeScalars {
            let category = scalar.properties.generalCategory
            if category == .nonspacingMark || category == .enclosingMark {
                marks += 1
                if marks > NameRule.maximumMarksInARow { continue }
            } else {
                marks = 0
            }
            let hidden =
                scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || category == .format
                || category == .lineSeparator || category == .paragraphSeparator
                || scalar.properties.isDefaultIgnorableCodePoint
            shown.append(hidden ? "?" : scalar)
        }
        return String(shown)
    }

    static func duration(_ seconds: TimeInterval) -> String {
        // The times come from a server: never trust them to fit an Int.
        let total = Int(clampingSeconds: seconds, to: 0...Int(Int32.max))
        if total < 60 { return "\(total) s" }
        if total < 3600 { return "\(total / 60) min" }
        return "\(total / 3600) h \(total % 3600 / 60) min"
    }

    /// Rows as aligned columns, two spaces apart; the last column is not padded.
    static func columns(_ rows: [[String]]) -> String {
        var widths = [Int](repeating: 0, count: rows.first?.count ?? 0)
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], cell.count)
            }
        }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 || index >= widths.count
                    ? cell : cell + String(repeating: " ", count: widths[index] - cell.count)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}
