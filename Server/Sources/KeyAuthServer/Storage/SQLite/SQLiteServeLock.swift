import Glibc

/// A `flock` on a SQLite database file for as long as a server serves it: exclusive for a
/// server whose replay cache is in memory (``ReplayCacheMode/memory``), shared for one whose
/// cache is in the database. Another server on the same file would keep replay claims the
/// memory cache never sees, so a memory server refuses to start beside any other, and any
/// server beside it; servers with database caches share a file as before. The admin commands
/// take no lock: they do not claim tokens.
///
/// The lock is taken before SQLite opens the file, and it is what creates a missing file
/// (empty, mode 0600, which SQLite takes for a new database): so a server refused beside
/// another has not migrated the database under it, and a start that fails later knows whether
/// it made the file and can remove it (``removeCreatedDatabase()``).
///
/// SQLite's own locks are `fcntl` locks; on Linux a `flock` is independent of them.
final class SQLiteServeLock: Sendable {
    private let descriptor: Int32
    private let path: String
    /// Whether this lock created the file.
    let created: Bool

    /// Takes the lock, without waiting, creating the file when it is missing.
    ///
    /// A file removed or replaced between the open and the lock (a start that created it and
    /// failed) is opened again, so that the lock is always on the file the path names.
    ///
    /// - Throws: ``StorageError`` `.unavailable` when another server holds a conflicting lock
    ///   or the file cannot be opened or created.
    init(path: String, exclusive: Bool) throws(StorageError) {
        for _ in 0..<5 {
            var created = true
            var descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if descriptor < 0 && errno == EEXIST {
                created = false
                descriptor = open(path, O_RDONLY | O_CLOEXEC)
            }
            guard descriptor >= 0 else {
                throw StorageError(
                    .unavailable, "cannot open \(path) to lock it: \(String(cString: strerror(errno)))")
            }
            guard flock(descriptor, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 else {
                let number = errno
                close(descriptor)
                guard number == EWOULDBLOCK else {
                    throw StorageError(.unavailable, "cannot lock \(path): \(String(cString: strerror(number)))")
                }
                throw StorageError(
                    .unavailable,
                    "another keyauth-server serves \(path), and a server with --replay-cache memory must be alone on "
                        + "its database; stop the other one, or run every instance with --replay-cache database")
            }
            guard Self.names(path, descriptor) else {
                close(descriptor)
                continue
            }
            self.descriptor = descriptor
            self.path = path
            self.created = created
            return
        }
        throw StorageError(.unavailable, "cannot lock \(path): it was replaced again and again while being locked")
    }

    deinit {
        close(descriptor)
    }

    /// Removes the database and its companions when this lock created the file and no other
    /// server has locked it since (several starting on a new path at once): for a start that
    /// failed after creating it. Call it after the storage is closed; the lock stays held.
    ///
    /// - Returns: whether it removed the database, so that the start can say so.
    @discardableResult
    func removeCreatedDatabase() -> Bool {
        // Exclusive: no other server may be using the file. Converting the lock may lose it for
        // a moment; the start is failing anyway.
        guard created, flock(descriptor, LOCK_EX | LOCK_NB) == 0, Self.names(path, descriptor) else { return false }
        for suffix in SQLiteFilePermissions.companionSuffixes {
            unlink(path + suffix)
        }
        return unlink(path) == 0
    }

    /// Whether `path` names the file open on `descriptor` (through a symlink, as SQLite follows
    /// one).
    private static func names(_ path: String, _ descriptor: Int32) -> Bool {
        var open = stat()
        var named = stat()
        return fstat(descriptor, &open) == 0 && stat(path, &named) == 0 && open.st_dev == named.st_dev
            && open.st_ino == named.st_ino
    }
}
