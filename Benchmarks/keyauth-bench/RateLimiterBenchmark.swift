import Foundation
import KeyAuthServer

// `keyauth-bench rate-limiter`: the cost of counting new addresses in a full limiter (main.swift).

/// Times ``AddressRateLimiter`` at its bound: first one thread, then `threads` at once.
func rateLimiterBenchmark(addresses: Int, threads: Int) {
    let limiter = AddressRateLimiter(limit: 10, window: 60, maximumAddresses: addresses, now: { 1_000_000 })
    // Distinct IPv6 /64s: 2001:db8::/32 followed by a counter.
    func key(_ index: Int) -> RateLimitKey {
        RateLimitKey(address: "2001:db8:\(String(index >> 16, radix: 16)):\(String(index & 0xFFFF, radix: 16))::1")
    }
    let newKeys = (0..<(addresses * 4)).map { key(addresses + $0) }
    for index in 0..<addresses { limiter.record(key(index)) }
    print("tracked addresses: \(limiter.trackedAddresses) (bound \(addresses))")

    let clock = ContinuousClock()
    let single = newKeys.count / 2
    var start = clock.now
    for index in 0..<single { limiter.record(newKeys[index]) }
    let singleSeconds = (clock.now - start) / .seconds(1)
    print(
        String(
            format: "1 thread: %d new addresses, %.3f µs each (%.0f/s), tracked %d", single,
            singleSeconds / Double(single) * 1e6, Double(single) / singleSeconds, limiter.trackedAddresses))

    let perThread = (newKeys.count - single) / threads
    start = clock.now
    DispatchQueue.concurrentPerform(iterations: threads) { thread in
        let first = single + thread * perThread
        for index in first..<(first + perThread) {
            _ = limiter.retryAfter(for: newKeys[index])
            limiter.record(newKeys[index])
        }
    }
    let parallelSeconds = (clock.now - start) / .seconds(1)
    let total = perThread * threads
    print(
        String(
            format: "%d threads: %d new addresses (check + count), %.3f µs each in wall time (%.0f/s), tracked %d",
            threads, total, parallelSeconds / Double(total) * 1e6, Double(total) / parallelSeconds,
            limiter.trackedAddresses))
}
