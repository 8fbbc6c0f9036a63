/// The one duration syntax of `keyauth` and `keyauth-server` options (`--timeout`, `--delay`,
/// `--token-lifetime`, `--since`...): a bare number of seconds (`90`), or whole numbers each
/// followed by a unit, `s`, `m`, `h` or `d`, largest first or not (`90s`, `5m`, `1h30m`, `2d`).
///
/// One parser, so that a form one option takes is never refused by another.
package enum DurationText {
    /// The largest number before one unit: a million days is far beyond any option's range, and
    /// keeps every sum far from overflowing.
    private static let largestCount: Int64 = 1_000_000

    /// The largest duration ``seconds(_:)`` accepts: a million days.
    package static let largestSeconds: Int64 = largestCount * 86_400

    /// The seconds `text` stands for, or nil when it is not a duration (empty, a sign, a
    /// fraction, an unknown unit, a number without a unit after a unit, or too large).
    package static func seconds(_ text: String) -> Int64? {
        if let plain = Int64(text), text.first?.isNumber == true { return plain <= largestSeconds ? plain : nil }
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        var total: Int64 = 0
        var digits = ""
        for character in text {
            if character.isASCII, character.isNumber {
                digits.append(character)
            } else if let unit = units[character], let count = Int64(digits), count <= largestCount {
                let (sum, overflow) = total.addingReportingOverflow(count * unit)
                guard !overflow, sum <= largestSeconds else { return nil }
                total = sum
                digits = ""
            } else {
                return nil
            }
        }
        return digits.isEmpty && !text.isEmpty ? total : nil
    }

    /// `seconds` written back in the largest units that divide it exactly (`5m`, `1h30m`, `90s`,
    /// `0s`), so that a value printed by one command reads as another command's option.
    package static func text(_ seconds: Int64) -> String {
        guard seconds > 0 else { return "\(seconds)s" }
        var rest = seconds
        var text = ""
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("m", 60), ("s", 1)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        return text
    }
}
