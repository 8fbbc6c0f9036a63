import Glibc

/// A `flock` on a SQLite database file for as long as a server serves it: exclusive for a
/// server whose replay cache is in memory (``ReplayCacheMode/memory``), shared for one whose
/// cache is in the database. Another server on the same file would keep replay claims the
/// memory cache never sees, so a memory server refuses to start beside any other, and any
/// server beside it; servers with database caches share a file as before. The admin commands
/// take no lock: they do not claim tokens.
///
/// SQLite's own locks are `fcntl` locks; on Linux a `flock` is independent of them.
final class SQLiteServeLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock, without waiting.
    ///
    /// - Throws: ``StorageError`` `.unavailable` when another server holds a conflicting lock
    ///   or the file cannot be opened.
    init(path: String, exclusive: Bool) throws(StorageError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw StorageError(.unavailable, "cannot open \(path) to lock it: \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 else {
            let number = errno
            close(descriptor)
            guard number == EWOULDBLOCK else {
                throw StorageError(.unavailable, "cannot lock \(path): \(String(cString: strerror(number)))")
            }
            throw StorageError(
                .unavailable,
                "another keyauth-server serves \(path), and a server with --replay-cache memory must be alone on its "
                    + "database; stop the other one, or run every instance with --replay-cache database")
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }
}
