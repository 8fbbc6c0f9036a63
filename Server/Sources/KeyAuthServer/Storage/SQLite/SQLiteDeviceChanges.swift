internal import CKeyAuthSQLite
import Glibc
import KeyAuth

/// Counts the transactions that change a registered device, across every keyauth process that
/// opens one SQLite file, so that a server may keep device records in memory
/// (``LoginDeviceCache``) and still see a revocation that another process commits
/// (`keyauth-server revoke`) at its next login.
///
/// Two counters live in a small file beside the database (`PATH-device-changes`), which each
/// process maps shared:
/// - `started` counts transactions that changed a device. The writer connection's temporary
///   triggers bump it inside the transaction, before its `COMMIT` (``SQLiteConnection``).
/// - `finished` counts those transactions once they ended: bumped after `COMMIT` or the
///   rollback returned.
///
/// While the two differ, a change is under way and nothing read from `devices` may be kept. A
/// process killed between the two leaves them apart, which turns keeping off (every login
/// reads its device, as without a cache) until every process has closed the file. Each process
/// holds a shared `flock` on the file while it has it open; one that gets the exclusive lock
/// knows that no other process is between the two counts, and starts them equal again.
///
/// The file decides what a server may believe about revocation, so it is as private as the
/// database: created 0600, and refused when it belongs to another user or others may open it.
///
/// Any process of the server's user can still shorten it (`truncate`, or a `cp` over it, which
/// truncates before it writes), and touching a mapped page past the end of its file is SIGBUS,
/// which ends the server. The file is not checked for that on every login: a check is an
/// `fstat`, a system call per login, and it would not make the server survive such a process.
/// SQLite maps the database's `-shm` file in the same way, and a `-shm` cut short under a
/// running server is SIGBUS at its next read, whatever this file does. A process of the
/// server's user can stop the server in either way, as it can with `kill`; THREAT-MODEL.md says
/// so. A file found short when it is opened is set up again, or refused.
final class SQLiteDeviceChanges: Sendable {
    /// The file's name beside the database.
    static let suffix = "-device-changes"
    /// The first word of the file: a file that lacks it was not written by this code.
    private static let magic: UInt64 = 0x6B65_7961_7574_6831
    /// One page: the three words, and room that keeps the mapping simple.
    private static let size = 4096

    private let descriptor: Int32
    /// The mapping: the magic word, then `started`, then `finished`. Written only through the
    /// shim's atomic builtins; never unmapped before `deinit`.
    nonisolated(unsafe) private let words: UnsafeMutablePointer<UInt64>

    /// Opens (creating if needed) the counters of the database at `databasePath`.
    ///
    /// - Throws: ``StorageError`` `.unprotected` when the file belongs to another user or is open
    ///   to others, `.unavailable` when it cannot be created, sized, locked or mapped (a full
    ///   disk among them).
    init(databasePath: String) throws(StorageError) {
        let path = databasePath + Self.suffix
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw Self.failure("cannot open", path, errno) }
        do {
            try Self.refuseIfExposed(descriptor, path)
            words = try Self.mapInitialised(descriptor, path)
            self.descriptor = descriptor
        } catch {
            close(descriptor)
            throw error
        }
    }

    deinit {
        munmap(words, Self.size)
        // Closing the file releases this process's shared lock.
        close(descriptor)
    }

    /// Transactions that changed a device so far, counted before each one's `COMMIT`.
    var started: UInt64 { ckeyauth_shared_counter_load(words + 1) }

    /// Of ``started``, those that have ended (committed or rolled back).
    var finished: UInt64 { ckeyauth_shared_counter_load(words + 2) }

    /// Called inside a transaction at its first change to a device, before it commits.
    func noteChangeStarted() {
        ckeyauth_shared_counter_increment(words + 1)
    }

    /// Called once that transaction's `COMMIT` or rollback has returned.
    func noteChangeFinished() {
        ckeyauth_shared_counter_increment(words + 2)
    }

    private static func refuseIfExposed(_ descriptor: Int32, _ path: String) throws(StorageError) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw failure("cannot inspect", path, errno) }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else {
            throw StorageError(
                .unprotected,
                "\(path) must be a file of the user who runs keyauth-server, with mode 600: it decides when the "
                    + "server rereads a revoked device; run: chmod 600 \(SQLiteFilePermissions.shellQuoted(path))")
        }
    }

    /// Locks the file shared and maps it, first setting it up when no other process has it.
    ///
    /// A process that finds the file locked waits for a shared lock, which it gets once the
    /// process setting the file up is done; it tries again when that process died before it
    /// was (the file is then short or lacks its first word).
    private static func mapInitialised(
        _ descriptor: Int32, _ path: String
    ) throws(StorageError) -> UnsafeMutablePointer<UInt64> {
        for _ in 0..<3 {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 {
                return try setUp(descriptor, path)
            }
            try lockShared(descriptor, path)
            var info = stat()
            if fstat(descriptor, &info) == 0, info.st_size >= size {
                let words = try map(descriptor, path)
                if ckeyauth_shared_counter_load(words) == magic { return words }
                munmap(words, size)
            }
            flock(descriptor, LOCK_UN)
        }
        throw StorageError(.unavailable, "\(path) is not a keyauth device-change file; remove it and start again")
    }

    /// Under the exclusive lock: no other process has the file, so no transaction is between
    /// its two counts, and both start at zero.
    private static func setUp(_ descriptor: Int32, _ path: String) throws(StorageError) -> UnsafeMutablePointer<UInt64>
    {
        // Blocks on disk now, so that a full disk is an error here and never a SIGBUS on a
        // later write to the mapping.
        let result = posix_fallocate(descriptor, 0, off_t(size))
        guard result == 0 else { throw failure("cannot allocate", path, result) }
        let words = try map(descriptor, path)
        ckeyauth_shared_counter_store(words + 1, 0)
        ckeyauth_shared_counter_store(words + 2, 0)
        ckeyauth_shared_counter_store(words, magic)
        do {
            // Exclusive to shared; another process may set the file up again in between,
            // which is harmless before this one has counted anything.
            try lockShared(descriptor, path)
        } catch {
            munmap(words, size)
            throw error
        }
        return words
    }

    private static func lockShared(_ descriptor: Int32, _ path: String) throws(StorageError) {
        while flock(descriptor, LOCK_SH) != 0 {
            guard errno == EINTR else { throw failure("cannot lock", path, errno) }
        }
    }

    private static func map(_ descriptor: Int32, _ path: String) throws(StorageError) -> UnsafeMutablePointer<UInt64> {
        let mapping = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0)
        guard let mapping, mapping != UnsafeMutableRawPointer(bitPattern: -1) else {
            throw failure("cannot map", path, errno)
        }
        return mapping.bindMemory(to: UInt64.self, capacity: 3)
    }

    private static func failure(_ action: String, _ path: String, _ code: Int32) -> StorageError {
        StorageError(
            .unavailable, "\(action) \(path): \(String(cString: strerror(code)))",
            underlying: NativeError(library: "libc", code: Int(code), text: String(cString: strerror(code))))
    }
}
