import Foundation
import Synchronization

/// Bounds how many slow hashes of typed codes (a recovery code's PBKDF2, about 40 ms of a core)
/// run at once, server-wide.
///
/// The per-address budgets bound what one address spends, not what many spend together: wrong
/// recovery codes from some hundred addresses would keep every core and every worker thread
/// hashing, and logins would wait behind them. With the gate, a check that finds every slot taken
/// is refused at once (503 `temporarily_unavailable`, `Retry-After: 1`) instead of waiting, so
/// the hashes use at most ``slots`` cores and hold at most ``slots`` worker threads, and the rest
/// go on answering logins. What such a flood still costs is recovery itself: a user's code may
/// be refused as busy until it stops (PROTOCOL.md section 4, "Recovery codes").
package final class SlowHashGate: Sendable {
    /// Hashes that may run at once.
    package let slots: Int
    private let running = Mutex(0)

    /// Half the processors, at least one: the other half stays for logins.
    package static let defaultSlots = max(1, ProcessInfo.processInfo.activeProcessorCount / 2)

    /// The seconds a refused client is told to wait: a hash takes well under one.
    static let retryAfter = 1

    /// - Parameter slots: hashes that may run at once; 0 refuses every one (tests use it to find
    ///   the gate full).
    package init(slots: Int = defaultSlots) {
        self.slots = max(slots, 0)
    }

    /// Runs `body` in a free slot.
    ///
    /// - Throws: ``ServiceError`` `.busy` at once when every slot is taken; `body`'s errors.
    func run<Result>(_ body: () throws -> Result) throws -> Result {
        let entered = running.withLock { count in
            guard count < slots else { return false }
            count += 1
            return true
        }
        guard entered else {
            throw ServiceError(
                .busy(retryAfter: Self.retryAfter), "the server is busy checking codes; try again in a second")
        }
        defer { running.withLock { $0 -= 1 } }
        return try body()
    }
}
