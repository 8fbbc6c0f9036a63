import Synchronization

/// Counts the device revocations this process made, so that what is built from the revoked
/// devices (the SSH revocation list) knows at once that it is out of date instead of waiting
/// for its next timed rebuild.
///
/// Only this process's revocations are seen: another instance on the same database, or the
/// `revoke` admin command, reaches a cache only through its timed rebuild.
package final class RevocationSignal: Sendable {
    private let count = Atomic<UInt64>(0)

    /// Creates a signal that has seen no revocation.
    package init() {}

    /// Revocations signalled so far; a cache compares it with the value it was built at.
    package var generation: UInt64 { count.load(ordering: .acquiring) }

    /// Says that a device was revoked.
    package func signal() {
        count.add(1, ordering: .releasing)
    }
}
