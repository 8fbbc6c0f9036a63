import Testing

@testable import KeyAuthServer

@Suite("Clock readings from different threads")
struct ServerClockTests {
    @Test("a duration whose end was read before its start is zero, not a trap")
    func readingsOutOfOrder() {
        // The checkpoint queue can store a later reading after another thread read "now": the
        // unsigned difference once underflowed and stopped the server under load.
        #expect(ServerClock.nanoseconds(from: 2_000, to: 1_000) == 0)
        #expect(ServerClock.nanoseconds(from: .max, to: 0) == 0)
        #expect(ServerClock.nanoseconds(from: 1_000, to: 2_500) == 1_500)
    }

    @Test("a connection whose deadline was stamped after the sweep read the clock is not overdue")
    func deadlineStampedLater() {
        let connection = TrackedConnection(descriptor: -1, clientAddress: "127.0.0.1", peer: nil, now: 5_000)
        #expect(!connection.isOverdue(now: 4_000, timeout: 10))
        #expect(connection.isOverdue(now: 5_011, timeout: 10))
    }
}
