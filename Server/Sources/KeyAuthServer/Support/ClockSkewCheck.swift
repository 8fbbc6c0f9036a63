import KeyAuth

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

    /// The verdict on a server whose clock reads `server` when the database's reads `database`.
    package static func verdict(server: Int64, database: Int64) -> Verdict {
        // The database's reading comes from another machine: saturate rather than trap on nonsense.
        let ahead = server >= database
        let difference = ahead ? server.subtractingSaturating(database) : database.subtractingSaturating(server)
        let description =
            "this server's clock is \(difference) s \(ahead ? "ahead of" : "behind") the database's"
        if difference > refusalBound {
            return .refuses(
                "\(description), more than the \(refusalBound) s leeway tokens are checked with: instances would "
                    + "refuse each other's tokens and the device assertions of clients with a good clock; set the "
                    + "clock (NTP) and start again")
        }
        if difference > warningBound {
            return .warns("warning: \(description); keep every instance's clock synchronized (NTP)")
        }
        return .agrees
    }
}

/// A server refusing to start because of ``ClockSkewCheck``.
package struct ClockSkewError: Error, CustomStringConvertible {
    package let description: String
}
