/// Arithmetic that cannot trap, for times and counts that came from the wire or from clocks read
/// on other threads.
///
/// In Swift an overflowing `+` or `-` is a trap, in release builds too: on a server one request
/// (an `exp` of `Int64.max`) or one unlucky interleaving ends every user's session. Where a value
/// was not bounded by a check just before, the sum or difference saturates at the type's limits
/// instead, which every caller here treats as "far in the future" or "far in the past".
extension FixedWidthInteger {
    /// `self + other`, or the type's limit in the direction of the overflow.
    package func addingSaturating(_ other: Self) -> Self {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self - other`, or the type's limit in the direction of the overflow.
    package func subtractingSaturating(_ other: Self) -> Self {
        let (difference, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return difference }
        return other > 0 ? .min : .max
    }

    /// `self * other`, or the type's limit with the sign of the exact product.
    package func multipliedSaturating(by other: Self) -> Self {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }
}

extension Int {
    /// `value` rounded down to a whole number, clamped to `range`; the range's lower bound for
    /// NaN. `Int(someDouble)` traps on NaN, infinities and anything out of `Int`'s range.
    package init(clampingSeconds value: Double, to range: ClosedRange<Int>) {
        guard !value.isNaN else {
            self = range.lowerBound
            return
        }
        if value <= Double(range.lowerBound) {
            self = range.lowerBound
        } else if value >= Double(range.upperBound) {
            self = range.upperBound
        } else {
            self = Int(value.rounded(.down))
        }
    }
}

extension Int64 {
    /// `value` rounded down to a whole number, clamped to Int64's range; 0 for NaN. For times
    /// written to files: `Int64(someDouble)` traps beyond the range, and a date read from a file
    /// or made from a server's `expires_in` can lie there.
    package init(clampingSeconds value: Double) {
        guard !value.isNaN else {
            self = 0
            return
        }
        if value <= -9.223_372_036_854_775_808e18 {
            self = .min
        } else if value >= 9.223_372_036_854_775_808e18 {
            self = .max
        } else {
            self = Int64(value.rounded(.down))
        }
    }
}
