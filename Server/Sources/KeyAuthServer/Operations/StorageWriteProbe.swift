import Glibc
import Synchronization

/// `/healthz`'s check that storage takes writes: a real, durable write
/// (``ServerStorage/probeWrite(instance:at:)``), made at most once per ``interval`` however
/// often `/healthz` is asked.
///
/// A read cannot see a full disk: SQLite reads on, PostgreSQL too, while every registration and
/// login fails for want of room. Only a write that must reach the disk proves there is some. But
/// each write costs a commit and an fsync, and `/healthz` is public (load balancers probe it,
/// and so can anyone), so a flood of probes must not become a flood of writes: one probe writes
/// at a time, at most once per ``interval``, and every other probe gets the last outcome without
/// touching storage.
///
/// A write that has not returned after ``stallLimit`` (a hung disk, a lock held elsewhere) counts
/// as failed for the probes that arrive meanwhile; the probe that started it waits for it.
final class StorageWriteProbe: Sendable {
    /// The least time between two probe writes: 1 s.
    static let interval: UInt64 = 1_000_000_000
    /// How long a write may run before probes count it as failed: 5 s.
    static let stallLimit: UInt64 = 5_000_000_000

    private struct State {
        /// When the last write ended (monotonic nanoseconds) and why it failed, if it did.
        var last: (endedAt: UInt64, failure: StorageError?)?
        /// When the write in progress started, if one is.
        var startedAt: UInt64?
    }

    private enum Decision {
        case answer(StorageError?)
        case write
    }

    private let state = Mutex(State())
    private let write: @Sendable () throws(StorageError) -> Void
    private let monotonicNanoseconds: @Sendable () -> UInt64

    /// - Parameters:
    ///   - write: the durable write; by default ``ServerStorage/probeWrite(instance:at:)`` of
    ///     this host's row (``instanceName``).
    ///   - monotonicNanoseconds: the clock the interval is measured on.
    init(
        write: @escaping @Sendable () throws(StorageError) -> Void,
        monotonicNanoseconds: @escaping @Sendable () -> UInt64 = ServerClock.monotonicNanoseconds
    ) {
        self.write = write
        self.monotonicNanoseconds = monotonicNanoseconds
    }

    /// A probe of `storage` that writes this host's row at the time `now` gives.
    convenience init(storage: any ServerStorage, now: @escaping @Sendable () -> Int64) {
        let instance = Self.instanceName()
        self.init(write: { () throws(StorageError) in try storage.probeWrite(instance: instance, at: now()) })
    }

    /// Nil when storage took the last write, else why not; writes first when the last write is
    /// older than ``interval`` and no other probe is writing.
    func check() -> StorageError? {
        let now = monotonicNanoseconds()
        let decision = state.withLock { state -> Decision in
            if let started = state.startedAt {
                guard ServerClock.nanoseconds(from: started, to: now) < Self.stallLimit else {
                    let seconds = Self.stallLimit / 1_000_000_000
                    return .answer(StorageError(.unavailable, "a storage write has not completed for \(seconds) s"))
                }
                return .answer(state.last?.failure)
            }
            if let last = state.last, ServerClock.nanoseconds(from: last.endedAt, to: now) < Self.interval {
                return .answer(last.failure)
            }
            state.startedAt = now
            return .write
        }
        switch decision {
        case .answer(let failure): return failure
        case .write: break
        }
        var failure: StorageError?
        do {
            try write()
        } catch {
            failure = error
        }
        let ended = monotonicNanoseconds()
        state.withLock { state in
            state.last = (ended, failure)
            state.startedAt = nil
        }
        return failure
    }

    /// The name of this instance's row: the host name, which stays the same across restarts
    /// (so restarts add no rows) and tells an operator reading the table which host probed.
    static func instanceName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "unknown-host" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "unknown-host" : name
    }
}
