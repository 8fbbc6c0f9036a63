import Testing

@testable import KeyAuth

@Suite("Arithmetic on values from the wire saturates instead of trapping")
struct SaturatingArithmeticTests {
    @Test("sums and differences stop at the limits of Int64")
    func saturates() {
        #expect(Int64.max.addingSaturating(1) == .max)
        #expect(Int64.min.addingSaturating(-1) == .min)
        #expect(Int64.min.subtractingSaturating(1) == .min)
        #expect(Int64(0).subtractingSaturating(.min) == .max)
        #expect(Int64(40).addingSaturating(2) == 42)
        #expect(Int64(40).subtractingSaturating(-2) == 42)
        #expect(Int64.max.multipliedSaturating(by: 2) == .max)
        #expect(Int64.max.multipliedSaturating(by: -2) == .min)
        #expect(Int64(-3).multipliedSaturating(by: -4) == 12)
    }

    @Test("a Double becomes an Int within bounds, NaN and infinities included")
    func clampsDoubles() {
        #expect(Int(clampingSeconds: .nan, to: 0...10) == 0)
        #expect(Int(clampingSeconds: .infinity, to: 0...10) == 10)
        #expect(Int(clampingSeconds: -.infinity, to: 0...10) == 0)
        #expect(Int(clampingSeconds: 9.2e18, to: 0...Int(Int32.max)) == Int(Int32.max))
        #expect(Int(clampingSeconds: 7.9, to: 0...10) == 7)
    }

    @Test("a PIN attempt file with a failure time of Int64.min asks for no wait instead of trapping")
    func corruptAttemptTime() {
        let state = AttemptState(failures: 9, lastFailure: .min)
        #expect(PINPresence.retryAfter(state, now: 1_800_000_000) == nil)
    }
}
