#if canImport(Glibc)
    import Glibc
#endif

/// A POSIX semaphore that a signal handler posts and a thread of its own waits on: how the
/// `keyauth` command and `keyauth-server serve` hand a stop signal from the handler, which may
/// do only async-signal-safe work (`sem_post` is), to ordinary code.
///
/// It lives by its address, an integer that an atomic holds and a handler reads without Swift's
/// one-time initialisation of anything; it is allocated once and never freed, since a handler
/// may run at any moment until the process ends. Memory, unlike a pipe's descriptor, cannot be
/// closed under its owner by code elsewhere in the process that closes a number twice.
package enum SignalSemaphore {
    /// Allocates and initialises a semaphore.
    ///
    /// - Returns: its address, or nil when `sem_init` fails.
    package static func make() -> UInt? {
        let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        guard sem_init(semaphore, 0, 0) == 0 else {
            semaphore.deallocate()
            return nil
        }
        return UInt(bitPattern: semaphore)
    }

    /// Posts the semaphore at `address` (0: none yet); async-signal-safe.
    package static func post(_ address: UInt) {
        guard let semaphore = UnsafeMutablePointer<sem_t>(bitPattern: address) else { return }
        sem_post(semaphore)
    }

    /// Waits for a post of the semaphore at `address`, through interruptions by signals.
    ///
    /// - Returns: false when waiting fails otherwise (no semaphore there).
    package static func wait(_ address: UInt) -> Bool {
        guard let semaphore = UnsafeMutablePointer<sem_t>(bitPattern: address) else { return false }
        while sem_wait(semaphore) != 0 {
            guard errno == EINTR else { return false }
        }
        return true
    }
}
