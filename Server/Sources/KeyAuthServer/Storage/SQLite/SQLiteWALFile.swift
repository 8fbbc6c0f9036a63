import Glibc
import KeyAuth
import Synchronization

/// What makes committed SQLite transactions durable; the group committer calls it after each
/// commit. Tests put a slow or stalled disk in its place.
protocol SQLiteWALSync: Sendable {
    /// Returns once every transaction committed before the call is durable.
    ///
    /// - Throws: ``StorageError`` when the data cannot be made durable.
    func sync() throws(StorageError)

    /// The error every later sync throws, once one sync failed in a way no later one can mend;
    /// nil until then. No write may begin then: it would commit, be seen by readers, and be
    /// answered 503.
    var lostDurability: StorageError? { get }
}

extension SQLiteWALSync {
    var lostDurability: StorageError? { nil }
}

/// The write-ahead log of one SQLite file, synced with `fdatasync` on a descriptor of its own.
///
/// SQLite documents `synchronous=FULL` in WAL mode as `NORMAL` plus one sync of the WAL after
/// each commit. With `FULL` that sync runs inside `COMMIT`, under the database's write lock, so
/// nothing could be written while it ran. The writer connection therefore runs with `NORMAL`
/// (a commit appends its frames to the log, and checkpoints still sync before and after), and
/// the group committer calls ``sync()`` right after each commit, outside the write lock: the
/// same sync, one step later, while the next batch's statements already run. An `fdatasync`
/// covers every byte written to the file before it was called, from any descriptor, so one call
/// makes every batch committed before it durable.
///
/// The log stays the same file while the server's connections are open (SQLite removes it only
/// when the last connection closes). Should another file ever take its place, the next sync
/// notices the new inode and syncs the database file too, which a checkpoint filled from the old
/// log before it went away. The directory is synced once per log file, so that the file itself
/// survives a power loss.
///
/// A failed sync fails every later one. Linux reports a writeback error to one `fsync` and may
/// drop the pages it could not write: the next `fdatasync` returns 0 without them, and a later
/// batch reported durable would sit in the log behind frames that never reached the disk, which
/// SQLite's recovery stops at. Only a restart, after the disk is checked, says again what is on
/// it (PostgreSQL stops for the same reason).
final class SQLiteWALFile: SQLiteWALSync {
    private let databasePath: String
    private let logPath: String
    /// The log's descriptor (-1 before the first sync), held through each sync.
    private let descriptor = Mutex<Int32>(-1)
    /// Whether a sync failed for good: read by every write, so never behind a sync's lock.
    private let lost = Atomic<Bool>(false)
    /// The first failure, which stays.
    private let failure = Mutex<StorageError?>(nil)

    /// - Parameter databasePath: the database file; its log is the same path with `-wal`.
    init(databasePath: String) {
        self.databasePath = databasePath
        self.logPath = databasePath + "-wal"
    }

    deinit {
        descriptor.withLock { if $0 >= 0 { Glibc.close($0) } }
    }

    var lostDurability: StorageError? {
        guard lost.load(ordering: .acquiring) else { return nil }
        return failure.withLock { $0 }.map(Self.stickyError)
    }

    func sync() throws(StorageError) {
        try descriptor.withLock { (descriptor: inout Int32) throws(StorageError) in
            if let lost = lostDurability { throw lost }
            do throws(SyncFailure) {
                try syncLog(&descriptor)
            } catch {
                switch error {
                case .cannotOpen(let error):
                    // A file that cannot be opened (EMFILE under load) loses nothing: the next
                    // sync tries again, from the same state.
                    throw error
                case .cannotSync(let error):
                    failure.withLock { $0 = $0 ?? error }
                    lost.store(true, ordering: .releasing)
                    throw error
                }
            }
        }
    }

    /// Why a sync failed: opening a file, which the next sync tries again, or syncing it, after
    /// which nothing can be trusted to be on disk.
    private enum SyncFailure: Error {
        case cannotOpen(StorageError)
        case cannotSync(StorageError)
    }

    private func syncLog(_ descriptor: inout Int32) throws(SyncFailure) {
        if descriptor < 0 || Self.isReplaced(descriptor, path: logPath) {
            if descriptor >= 0 {
                // The database file first, which a checkpoint filled from the old log: the old
                // descriptor is let go only once it is synced, so a failure here is tried again.
                try Self.syncFile(databasePath)
                Glibc.close(descriptor)
                descriptor = -1
            }
            let opened = open(logPath, O_RDONLY | O_CLOEXEC)
            guard opened >= 0 else { throw .cannotOpen(Self.failure("cannot open the SQLite log \(logPath)")) }
            do throws(SyncFailure) {
                try Self.syncFile(Self.directory(of: logPath))
            } catch {
                Glibc.close(opened)
                throw error
            }
            descriptor = opened
        }
        guard fdatasync(descriptor) == 0 else {
            throw .cannotSync(Self.failure("cannot sync the SQLite log \(logPath)"))
        }
    }

    /// The error of every sync after `failure`.
    private static func stickyError(_ failure: StorageError) -> StorageError {
        StorageError(
            .queryFailed,
            "an earlier sync of the SQLite log failed (\(failure.message)); nothing written since can be "
                + "known to be on disk: check the disk and restart keyauth-server")
    }

    /// Whether `path` no longer names the file open on `descriptor`.
    private static func isReplaced(_ descriptor: Int32, path: String) -> Bool {
        var open = stat()
        var named = stat()
        guard fstat(descriptor, &open) == 0, stat(path, &named) == 0 else { return true }
        return open.st_ino != named.st_ino || open.st_dev != named.st_dev
    }

    /// `fsync` of the file or directory at `path`.
    ///
    /// A file system that cannot sync directories (EINVAL, EBADF: some network and FUSE mounts)
    /// keeps nothing in them to lose, as PostgreSQL also holds: that is no failure.
    private static func syncFile(_ path: String) throws(SyncFailure) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .cannotOpen(failure("cannot open \(path) to sync it")) }
        defer { Glibc.close(descriptor) }
        guard fsync(descriptor) != 0 else { return }
        let number = errno
        var status = stat()
        if number == EINVAL || number == EBADF, fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFDIR {
            return
        }
        errno = number
        throw .cannotSync(failure("cannot sync \(path)"))
    }

    private static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The error for the failed call just made, with `errno`.
    private static func failure(_ message: String) -> StorageError {
        let number = errno
        return StorageError(
            .queryFailed, message,
            underlying: NativeError(library: "errno", code: Int(number), text: String(cString: strerror(number))))
    }
}
