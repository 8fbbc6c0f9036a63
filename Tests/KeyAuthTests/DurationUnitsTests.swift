import Testing

@testable import KeyAuth

@Suite("Durations in the units poll(2) and TimeInterval take")
struct DurationUnitsTests {
    @Test("milliseconds round up, so a poll never wakes before its deadline")
    func millisecondsRoundUp() {
        #expect(Duration.milliseconds(1500).millisecondsRoundedUp == 1500)
        #expect(Duration.microseconds(1).millisecondsRoundedUp == 1)
        #expect(Duration.microseconds(2001).millisecondsRoundedUp == 3)
        #expect(Duration.zero.millisecondsRoundedUp == 0)
        #expect(Duration.seconds(-1).millisecondsRoundedUp == 0, "poll waits forever for a negative timeout")
    }

    @Test("milliseconds of a very long duration stop at Int32's limit, of a past one at zero")
    func millisecondsClamp() {
        #expect(Duration.seconds(Int64.max).millisecondsRoundedUp == .max)
        #expect(Duration.seconds(Int64.min).millisecondsRoundedUp == 0)
    }

    @Test("seconds keep their fraction")
    func secondsKeepFraction() {
        #expect(Duration.milliseconds(2500).inSeconds == 2.5)
        #expect(Duration.seconds(-3).inSeconds == -3)
    }
}
