import Glibc

/// Keeps the SQLite database and its `-wal` and `-shm` companions private to the user that runs
/// the server.
///
/// The database holds the server's private signing key (unless `--signing-key-file` keeps it
/// elsewhere), and the WAL holds recent pages of it: anyone who can read either can forge access
/// tokens for every user. SQLite creates its files with the process umask (0644 under the
/// common 022), so the server does not rely on it: it refuses a database that others can open or
/// that belongs to someone else, and tightens the companions, which SQLite recreates at will.
enum SQLiteFilePermissions {
    /// The companions SQLite keeps beside a database in WAL mode, and keyauth's count of device
    /// changes (``SQLiteDeviceChanges``).
    static let companionSuffixes = ["-wal", "-shm", SQLiteDeviceChanges.suffix]

    /// Checks `path` before SQLite opens it.
    ///
    /// A missing file is fine when `creatingIfMissing` (SQLite creates it, and ``restrict(_:)``
    /// makes it 0600 afterwards); an existing one must be owned by the effective user and carry
    /// no group or other permission bit, in a directory others cannot write
    /// (``refuseExposedDirectory(of:)``). Companions that exist are made 0600 when they are ours
    /// and refused when they are not.
    ///
    /// The directory must exist and be writable, and an existing file writable
    /// (``checkWritable(_:exists:)``), for every command: SQLite writes the `-wal` and `-shm`
    /// files of a database in WAL mode even to read it.
    ///
    /// - Throws: ``StorageError`` `.notFound` when the file is missing and may not be created,
    ///   `.unavailable` when it cannot be written, `.unprotected` (naming the file and the
    ///   command that fixes it) otherwise.
    static func checkBeforeOpening(_ path: String, creatingIfMissing: Bool) throws(StorageError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT && !creatingIfMissing {
                // The settings file is named too: an operator who runs an admin command without
                // the serve's --config gets the default database, not the one the server uses.
                throw StorageError(
                    .notFound,
                    "no database at \(path) (keyauth-server serve creates it; pass --db PATH, set KEYAUTH_SERVER_DB, "
                        + "or --config FILE with db = PATH)")
            }
            try refuseExposedDirectory(of: path)
            try checkWritable(path, exists: false)
            // Any other failure (no permission) is SQLite's to report.
            return
        }
        try refuseIfExposed(path, info)
        try refuseExposedDirectory(of: path)
        try checkWritable(path, exists: true)
        for suffix in companionSuffixes {
            try restrictCompanion(path + suffix)
        }
    }

    /// Makes the database and its companions 0600 after SQLite opened (and perhaps created)
    /// them, whatever the umask was.
    ///
    /// - Throws: ``StorageError`` `.unprotected` when a file belongs to another user or cannot
    ///   be restricted.
    static func restrict(_ path: String) throws(StorageError) {
        for file in [path] + companionSuffixes.map({ path + $0 }) {
            try restrictCompanion(file)
        }
    }

    /// Refuses a database whose owner or mode lets another user read or replace it.
    private static func refuseIfExposed(_ path: String, _ info: stat) throws(StorageError) {
        let owner = info.st_uid
        let user = geteuid()
        guard owner == user else {
            throw StorageError(
                .unprotected,
                "\(path) belongs to \(describe(owner)), not to \(describe(user)) who runs keyauth-server: it holds "
                    + "the server's signing key; run keyauth-server as \(userName(owner) ?? "uid \(owner)"), or: "
                    + "chown \(userName(user) ?? String(user)) \(shellQuoted(path))")
        }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            let who = mode & 0o007 != 0 ? "others" : "its group"
            let what = mode & 0o044 != 0 ? "readable" : (mode & 0o022 != 0 ? "writable" : "accessible")
            throw StorageError(
                .unprotected,
                "\(path) is \(what) by \(who) (mode \(String(mode, radix: 8))): it holds the server's signing key; "
                    + "run: chmod 600 \(shellQuoted(path))")
        }
    }

    /// Linux's `O_PATH` (`010000000` on x86-64 and arm64), which Glibc's Swift module leaves out
    /// because the header defines it only under `_GNU_SOURCE`.
    private static let pathOnly: Int32 = 0o10_000_000

    /// Makes `path` 0600 if it exists and is ours; refuses it if it is someone else's.
    ///
    /// The file is opened with `O_PATH`, and changed through `/proc/self/fd`, because this runs
    /// after SQLite opened the database: closing an ordinary descriptor of a file drops every
    /// POSIX lock the process holds on it, SQLite's included. A server without its locks looks
    /// closed to any other process that opens the database (an admin command, a backup), whose
    /// last connection then checkpoints and deletes the WAL the server is still writing, and its
    /// acknowledged writes are lost. Linux keeps the locks when an `O_PATH` descriptor closes.
    private static func restrictCompanion(_ path: String) throws(StorageError) {
        let descriptor = open(path, pathOnly | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            // Missing is normal (SQLite removes the companions on a clean close); anything else
            // (no permission) surfaces when SQLite opens the database.
            return
        }
        defer { close(descriptor) }
        var info = stat()
        // A symlink (O_NOFOLLOW with O_PATH opens the link itself) is SQLite's to refuse.
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return }
        guard info.st_uid == geteuid() else {
            throw StorageError(
                .unprotected,
                "\(path) belongs to \(describe(info.st_uid)), not to \(describe(geteuid())) who runs keyauth-server; "
                    + "run keyauth-server as \(userName(info.st_uid) ?? "uid \(info.st_uid)")")
        }
        guard info.st_mode & 0o077 != 0 else { return }
        // fchmod does not take an O_PATH descriptor; its /proc/self/fd link names the same file.
        guard chmod("/proc/self/fd/\(descriptor)", 0o600) == 0 else {
            let text = String(cString: strerror(errno))
            throw StorageError(.unprotected, "cannot restrict \(path) to mode 600: \(text)")
        }
    }

    /// `user alice (uid 1000)`, or `uid 1000` when the user database has no name for it.
    static func describe(_ uid: uid_t) -> String {
        userName(uid).map { "user \($0) (uid \(uid))" } ?? "uid \(uid)"
    }

    /// The login name of `uid`, through the reentrant lookup (admin commands may run in a
    /// process with other threads).
    static func userName(_ uid: uid_t) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name
        else { return nil }
        return String(cString: name)
    }

    /// `path` as one shell word, so that the printed command can be pasted as it is.
    static func shellQuoted(_ path: String) -> String {
        let plain = path.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "/"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: ":"), UInt8(ascii: "@"):
                true
            default:
                false
            }
        }
        if plain && !path.isEmpty { return path }
        return "'" + path.replacingAll("'", with: "'\\''") + "'"
    }
}

extension String {
    /// The text with every `target` replaced, without Foundation.
    fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
        var result = ""
        for character in self {
            if character == target { result += replacement } else { result.append(character) }
        }
        return result
    }
}
