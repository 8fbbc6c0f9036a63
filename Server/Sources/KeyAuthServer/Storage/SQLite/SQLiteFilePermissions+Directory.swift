import Glibc
import KeyAuth

/// The database's directory and the server's right to write there, checked before SQLite
/// opens the file, so that each fault reads as itself rather than as the SQLite or `open` error
/// of whichever file came first (`cannot open PATH-device-changes: No such file or directory`,
/// `attempt to write a readonly database`).
extension SQLiteFilePermissions {
    /// Refuses a directory whose other users could replace the database: one that belongs to a
    /// user other than the server's and root, or that its group or others may write without the
    /// sticky bit (which, as in `/tmp`, keeps them from renaming or removing the server's files).
    ///
    /// - Throws: ``StorageError`` `.unprotected` naming the directory and the fix.
    static func refuseExposedDirectory(of path: String) throws(StorageError) {
        let directory = SecureFile.parentDirectory(of: path)
        var info = stat()
        // A directory that cannot be inspected is reported by the checks that need it.
        guard stat(directory, &info) == 0 else { return }
        let owner = info.st_uid
        guard owner == geteuid() || owner == 0 else {
            let writers = geteuid() == 0 ? "root" : "\(describe(geteuid())) and root"
            throw StorageError(
                .unprotected,
                "the directory \(directory) of \(path) belongs to \(describe(owner)), who could replace the "
                    + "database, which holds the server's signing key; keep it in a directory only \(writers) can "
                    + "write, such as /var/lib/keyauth")
        }
        let mode = info.st_mode & 0o7777
        guard mode & 0o022 == 0 || mode & S_ISVTX != 0 else {
            let who = mode & 0o002 != 0 ? "others" : "its group"
            throw StorageError(
                .unprotected,
                "the directory \(directory) of \(path) is writable by \(who) (mode \(String(mode, radix: 8))), who "
                    + "could replace the database, which holds the server's signing key; run: chmod go-w "
                    + shellQuoted(directory))
        }
    }

    /// Checks that the server can create and write the database and its companions: the
    /// directory exists and is writable, and an existing file is writable.
    ///
    /// - Throws: ``StorageError`` `.unavailable` saying which and what to do.
    static func checkWritable(_ path: String, exists: Bool) throws(StorageError) {
        let directory = SecureFile.parentDirectory(of: path)
        var info = stat()
        if stat(directory, &info) != 0 && errno != ENOENT && errno != ENOTDIR {
            let reason = String(cString: strerror(errno))
            throw StorageError(
                .unavailable,
                "cannot create the database \(path): \(describe(geteuid())) cannot reach the directory \(directory): "
                    + "\(reason); keep the database in a directory of that user's")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw StorageError(
                .unavailable,
                "cannot create the database \(path): the directory \(directory) does not exist; create it "
                    + "(mkdir -m 700 \(shellQuoted(directory)), owned by \(describe(geteuid()))), or pass --db with "
                    + "a path in an existing directory")
        }
        if faccessat(AT_FDCWD, directory, W_OK | X_OK, AT_EACCESS) != 0 {
            let number = errno
            let user = userName(geteuid()) ?? String(geteuid())
            throw notWritable(
                directory, path: path, errno: number, why: "SQLite keeps the database's -wal and -shm files there",
                fix: "chown \(user) \(shellQuoted(directory)), or keep the database in a directory of \(user)'s")
        }
        if exists && faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS) != 0 {
            let number = errno
            throw notWritable(
                path, path: path, errno: number, why: "the server writes to it", fix: "chmod 600 \(shellQuoted(path))")
        }
    }

    /// The error for `file` (the database or its directory) that the server cannot write.
    private static func notWritable(_ file: String, path: String, errno number: Int32, why: String, fix: String)
        -> StorageError
    {
        if number == EROFS {
            return StorageError(
                .unavailable,
                "cannot write the database \(path): \(file) is on a read-only file system; put the database on a "
                    + "writable one (--db PATH), or mount it read-write")
        }
        guard number == EACCES else {
            return StorageError(
                .unavailable, "cannot write the database \(path): \(file): \(String(cString: strerror(number)))")
        }
        var info = stat()
        let mode = stat(file, &info) == 0 ? " (mode \(String(info.st_mode & 0o7777, radix: 8)))" : ""
        return StorageError(
            .unavailable,
            "cannot write the database \(path): \(file)\(mode) is not writable by \(describe(geteuid())), and "
                + "\(why); run: \(fix)")
    }
}
