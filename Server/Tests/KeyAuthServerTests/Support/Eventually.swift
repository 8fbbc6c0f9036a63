import Glibc

@testable import KeyAuthServer

/// Polls `condition` every `intervalMicroseconds` until it holds or `seconds` have passed;
/// returns whether it held. For tests that wait on another thread's or process's effect.
func eventually(
    within seconds: UInt64 = 20, every intervalMicroseconds: UInt32 = 5_000, _ condition: () -> Bool
) -> Bool {
    let deadline = ServerClock.monotonicNanoseconds() + seconds * 1_000_000_000
    while !condition() {
        guard ServerClock.monotonicNanoseconds() < deadline else { return false }
        usleep(intervalMicroseconds)
    }
    return true
}
