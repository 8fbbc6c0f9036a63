import Glibc
import KeyAuth
import Synchronization

/// The comparison `serve` makes at start between its clock and the database's, and the margin
/// the shared replay cache keeps for clocks that differ less than that.
///
/// Instances on one PostgreSQL database each judge `exp`, `iat` and code expiry by their own
/// clock, and any of them purges the shared replay cache and the revocation records by its own
/// clock too. An instance whose clock is ahead would purge a claim while an instance behind it
/// still accepts its token, which could then be used twice; so the purge keeps every record
/// ``purgeMargin`` seconds past its expiry. That only helps while clocks differ by less than
/// that, so a server whose clock differs from the database's by more than ``refusalBound``
/// refuses to start (two instances then differ by at most twice that), and one off by more than
/// ``warningBound`` starts with a warning: nothing else would show the drift until logins fail.
package enum ClockSkewCheck {
    /// Seconds of difference that `serve` reports as a warning: within the verifiers' leeway,
    /// but already a share of it, and more than NTP leaves.
    package static let warningBound: Int64 = 2
    /// Seconds of difference past which `serve` refuses to start: the verifiers' leeway. An
    /// instance further off refuses fresh device assertions and DPoP proofs (or calls them
    /// issued in the future), and other instances refuse its tokens the same way.
    package static let refusalBound: Int64 = DeviceAssertionVerifier.leeway
    /// Seconds past its expiry that a replay-cache claim or a revocation record is kept before
    /// the cleanup deletes it: more than two instances within ``refusalBound`` of the database
    /// can differ, with room for drift after the start.
    package static let purgeMargin: Int64 = 60

    /// What a difference means.
    package enum Verdict: Equatable, Sendable {
        case agrees
        /// Start, logging this line.
        case warns(String)
        /// Do not start; this says why.
        case refuses(String)
    }

    /// How far apart the clocks are, and that said in words.
    static func difference(server: Int64, database: Int64) -> (seconds: Int64, description: String) {
        // The database's reading comes from another machine: saturate rather than trap on nonsense.
        let ahead = server >= database
        let difference = ahead ? server.subtractingSaturating(database) : database.subtractingSaturating(server)
        return (difference, "this server's clock is \(difference) s \(ahead ? "ahead of" : "behind") the database's")
    }

    /// How far apart two clocks are, by the bounds above.
    enum Agreement: Sendable {
        /// Within ``warningBound``.
        case agrees
        /// Within ``refusalBound``, past the warning.
        case drifts
        /// Past the leeway.
        case disagrees

        init(difference: Int64) {
            self =
                difference > ClockSkewCheck.refusalBound
                ? .disagrees : difference > ClockSkewCheck.warningBound ? .drifts : .agrees
        }
    }

    /// The verdict on a server whose clock reads `server` when the database's reads `database`.
    package static func verdict(server: Int64, database: Int64) -> Verdict {
        let (difference, description) = Self.difference(server: server, database: database)
        switch Agreement(difference: difference) {
        case .disagrees:
            return .refuses(
                "\(description), more than the \(refusalBound) s leeway tokens are checked with: instances would "
                    + "refuse each other's tokens and the device assertions of clients with a good clock; set the "
                    + "clock (NTP) and start again")
        case .drifts:
            return .warns("warning: \(description); keep every instance's clock synchronized (NTP)")
        case .agrees:
            return .agrees
        }
    }
}

/// A server refusing to start because of ``ClockSkewCheck``.
package struct ClockSkewError: Error, CustomStringConvertible {
    package let description: String
}

/// The clocks' agreement as a running server keeps watching it.
///
/// `serve` compares its clock with the database's at start (``ClockSkewCheck``), but a clock can
/// go wrong later: NTP stopped, a virtual machine resumed from a snapshot, a `date -s`. An
/// instance past the leeway refuses good tokens, and past ``ClockSkewCheck/purgeMargin`` lets
/// another instance's replay-cache entries go while it still accepts their tokens. So each
/// cleanup reads the database's clock again (PostgreSQL only), the log says once when the
/// clocks stop or start agreeing, and while they differ by more than the leeway `/healthz`
/// answers 503 naming the check `clock`, so that a load balancer takes this instance out until
/// the clock is set. Meanwhile the instance answers every other request but the discovery
/// documents with 503 too, for clients that reach it directly, and the cleanup purges the shared
/// records by the database's clock (``databaseOffset``), not its own.
final class ClockSkewMonitor: Sendable {
    /// A change the log reports: its line and its level.
    struct Change: Equatable {
        /// The log level of a change.
        enum Level: Equatable {
            /// Past the leeway: `/healthz` fails.
            case error
            /// Past the warning bound, within the leeway.
            case warning
            /// The end of either.
            case notice
        }

        let line: String
        let level: Level
    }

    /// The last reading's agreement, and its words while the clocks disagree.
    private let state = Mutex<(agreement: ClockSkewCheck.Agreement, refusal: String?)>((.agrees, nil))
    /// Whether the last reading was past the leeway, for the check every request makes.
    private let pastLeeway = Atomic<Bool>(false)
    /// The database's clock minus this host's at the last reading, in seconds.
    private let offset = Atomic<Int64>(0)
    /// The wall clock minus the monotonic clock, in nanoseconds, at the last reading;
    /// `Int64.min` before one (with SQLite, always).
    private let wallBase = Atomic<Int64>(.min)
    /// Whether the wall clock was set since the last reading: requests wait for the next.
    private let stepped = Atomic<Bool>(false)
    /// Called once per step, with how far the wall clock moved (nanoseconds): it compares the
    /// clocks again at once (``KeyAuthResponder``).
    private let stepHandler = Mutex<(@Sendable (Int64) -> Void)?>(nil)

    /// How far the wall clock may move against the monotonic clock between two readings before
    /// the instance calls it set (a step): NTP slews both alike, so only a step moves them apart.
    static let stepBoundNanoseconds: Int64 = 2_000_000_000

    /// Records the clocks' readings; returns the log line when the agreement changed (the
    /// first reading, at start, is compared with agreement: `serve` reports it itself).
    ///
    /// `wallOffset` is the wall clock minus the monotonic clock when `server` was read
    /// (``wallOffsetNow()``); later requests compare theirs with it (``refusesRequests(wallOffset:)``).
    func record(server: Int64, database: Int64, wallOffset: Int64 = wallOffsetNow()) -> Change? {
        let (difference, description) = ClockSkewCheck.difference(server: server, database: database)
        let agreement = ClockSkewCheck.Agreement(difference: difference)
        offset.store(database.subtractingSaturating(server), ordering: .relaxed)
        pastLeeway.store(agreement == .disagrees, ordering: .relaxed)
        wallBase.store(wallOffset, ordering: .relaxed)
        stepped.store(false, ordering: .releasing)
        let previous = state.withLock { state in
            defer { state = (agreement, agreement == .disagrees ? description : nil) }
            return state.agreement
        }
        let leeway = ClockSkewCheck.refusalBound
        switch (previous, agreement) {
        case (.agrees, .agrees), (.drifts, .drifts), (.disagrees, .disagrees):
            return nil
        case (_, .disagrees):
            return Change(
                line: "\(description), more than the \(leeway) s leeway tokens are checked with: this instance "
                    + "answers 503 (/healthz too) until the clocks agree again; set the clock (NTP)", level: .error)
        case (.agrees, .drifts):
            return Change(
                line: "\(description); keep every instance's clock synchronized (NTP)", level: .warning)
        case (.disagrees, _):
            return Change(
                line: "\(description) now, within the \(leeway) s leeway: /healthz passes the clock check again",
                level: .notice)
        case (.drifts, .agrees):
            return Change(line: "\(description) now: the clocks agree again", level: .notice)
        }
    }

    /// Why `/healthz` fails, or nil while the clocks agree within the leeway.
    var refusal: String? {
        state.withLock { $0.refusal }
    }

    /// Whether the last reading found the clocks further apart than the leeway: the instance
    /// then judges no token, code or expiry by its clock (``KeyAuthResponder``).
    var isPastLeeway: Bool {
        pastLeeway.load(ordering: .relaxed)
    }

    /// Whether a request must be refused: the last reading was past the leeway, or the wall
    /// clock has been set since it (by more than ``stepBoundNanoseconds`` against the monotonic
    /// clock: `date -s`, a virtual machine resumed from a snapshot, an NTP step). The readings
    /// come a minute apart, and a step between them used to be trusted until the next; now the
    /// first request after a step sees it, calls the step handler once, and requests wait for
    /// the comparison it makes. Two clock readings and a few atomic loads; nothing before the
    /// first reading (SQLite).
    ///
    /// A step is looked for while the clocks disagree too: setting the clock right is a step,
    /// and the comparison it asks for is what lets the instance answer again before the next
    /// cleanup.
    func refusesRequests(wallOffset: @autoclosure () -> Int64 = wallOffsetNow()) -> Bool {
        let base = wallBase.load(ordering: .relaxed)
        guard base != .min else { return false }
        if stepped.load(ordering: .acquiring) { return true }
        let moved = wallOffset().subtractingSaturating(base)
        guard moved > Self.stepBoundNanoseconds || moved < -Self.stepBoundNanoseconds else {
            return pastLeeway.load(ordering: .relaxed)
        }
        if !stepped.exchange(true, ordering: .acquiringAndReleasing) {
            stepHandler.withLock { $0 }?(moved)
        }
        return true
    }

    /// Whether the wall clock was set since the last reading (and no reading since).
    var wasSetSinceReading: Bool {
        stepped.load(ordering: .acquiring)
    }

    /// Has `handler` called, off the request's path, when a step is first seen.
    func whenStepped(_ handler: @escaping @Sendable (Int64) -> Void) {
        stepHandler.withLock { $0 = handler }
    }

    /// The wall clock minus the monotonic clock now, in nanoseconds: constant while time
    /// passes, changed by a step of the wall clock.
    static func wallOffsetNow() -> Int64 {
        var wall = timespec()
        var monotonic = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        clock_gettime(CLOCK_MONOTONIC, &monotonic)
        let seconds = Int64(wall.tv_sec).subtractingSaturating(Int64(monotonic.tv_sec))
        return seconds.multipliedSaturating(by: 1_000_000_000)
            .addingSaturating(Int64(wall.tv_nsec) - Int64(monotonic.tv_nsec))
    }

    /// Seconds to add to this host's clock to read the database's, as of the last reading (0
    /// before one, and with SQLite). The cleanup purges the shared records by it, so that an
    /// instance whose clock went ahead does not delete what instances on time still need.
    var databaseOffset: Int64 {
        offset.load(ordering: .relaxed)
    }
}
