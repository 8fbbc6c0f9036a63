import Glibc

/// Files that hold secrets: created 0600 in 0700 directories, replaced atomically, and checked
/// before they are trusted.
///
/// "Atomically" means a temporary file in the same directory, `fsync`, `rename`, then `fsync` of
/// the directory: a process killed at any point leaves either the old file or the new one, never
/// a torn mix, and a power cut after the call returns cannot undo the rename.
package enum SecureFile {
    /// Creates `path` and any missing parents with mode 0700 (existing ones are left as they are).
    package static func createDirectory(_ path: String) throws(KeyAuthError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                throw errnoError(.storageFailed, "cannot create the directory \(current)")
            }
        }
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw KeyAuthError(.storageFailed, "\(path) is not a directory")
        }
        // Someone else's directory is refused: its owner could replace whatever is written into
        // it, and its mode is not ours to change.
        guard info.st_uid == geteuid() else {
            throw KeyAuthError(
                .keyUnprotected,
                "the directory \(path) belongs to uid \(info.st_uid), not to you (uid \(geteuid())); "
                    + "refusing to keep secrets in it")
        }
        // A directory that already existed (a KEYAUTH_HOME made by hand at 0755) is tightened to
        // 0700.
        if info.st_mode & 0o077 != 0 && chmod(path, 0o700) != 0 {
            throw errnoError(.storageFailed, "cannot restrict the directory \(path) to 0700")
        }
    }

    /// Checks that `directory` is one the user alone controls: a directory owned by the user,
    /// with no group or other permission bits.
    ///
    /// A secret file's own mode protects its bytes, but whoever can write to its directory can
    /// replace it (rename their own key or token over it) or read what a looser directory lists,
    /// so a secret is trusted only in such a directory: the rule is 0600 files in 0700
    /// directories, as keyauth creates them.
    /// - Throws: `.keyUnprotected` naming the directory and the fix; `.storageFailed` when it
    ///   cannot be inspected.
    /// - Parameter readable: whether group and others may read and search it (0755), for a
    ///   directory whose files are not secret but must not be replaced by anyone else; writing
    ///   is refused all the same.
    package static func checkProtectedDirectory(_ directory: String, readable: Bool = false) throws(KeyAuthError) {
        var info = stat()
        guard stat(directory, &info) == 0 else { throw errnoError(.storageFailed, "cannot inspect \(directory)") }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw KeyAuthError(.keyUnprotected, "\(directory) is not a directory; refusing to use it")
        }
        guard info.st_uid == geteuid() else {
            throw KeyAuthError(
                .keyUnprotected,
                "the directory \(directory) belongs to uid \(info.st_uid), not to you (uid \(geteuid())); "
                    + "refusing to use the secrets in it")
        }
        let mode = info.st_mode & 0o777
        guard mode & (readable ? 0o022 : 0o077) == 0 else {
            throw KeyAuthError(
                .keyUnprotected,
                "permissions \(String(mode, radix: 8)) for the directory \(directory) are too open: others could "
                    + "replace the secrets in it; it must be accessible only by you (chmod 700 \(directory))")
        }
    }

    /// The calls that make a write durable, whose failures ``write(_:to:calls:)`` reports.
    ///
    /// A failing `close` (NFS reporting a deferred write error) or directory `fsync` (a disk
    /// error) cannot be provoked on a test machine, so tests pass their own that fail on purpose.
    package struct DurabilityCalls: Sendable {
        /// `close(2)`.
        package var close: @Sendable (Int32) -> Int32
        /// `fsync(2)`, of the file and of its directory.
        package var fsync: @Sendable (Int32) -> Int32

        package init(
            close: @escaping @Sendable (Int32) -> Int32 = { Glibc.close($0) },
            fsync: @escaping @Sendable (Int32) -> Int32 = { Glibc.fsync($0) }
        ) {
            self.close = close
            self.fsync = fsync
        }

        /// The system's own.
        package static let system = DurabilityCalls()
    }

    /// The start of a temporary file's name; the writer's process id and random characters follow.
    static let temporaryPrefix = ".tmp-"
    /// Seconds since its last change after which a temporary file of a process that no longer
    /// exists is removed: no write takes this long.
    static let abandonedAfter = 600

    /// Removes the temporary files of writers that died before their rename (a `kill -9`, a
    /// power cut): `.tmp-PID-…` of a process that no longer exists, unchanged for ten minutes.
    /// Such a file may hold a second copy of a private key (under a new PIN, say) that nothing
    /// would ever read or delete. A live writer's file, and one whose name has no process id,
    /// are left alone.
    static func removeAbandonedTemporaries(in directory: String) {
        guard let listing = opendir(directory) else { return }
        defer { closedir(listing) }
        var names: [String] = []
        while let entry = readdir(listing) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name.hasPrefix(temporaryPrefix) { names.append(name) }
        }
        for name in names {
            let rest = name.dropFirst(temporaryPrefix.count)
            guard let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]), pid > 0, pid != getpid()
            else { continue }
            // Also old: a pid names a process only in its own namespace and on its own host,
            // and a home shared with a container or over NFS holds other writers' files too.
            var info = stat()
            guard lstat("\(directory)/\(name)", &info) == 0, info.st_mode & S_IFMT == S_IFREG,
                info.st_mtim.tv_sec < time(nil).subtractingSaturating(abandonedAfter)
            else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                unlink("\(directory)/\(name)")
            }
        }
    }

    /// Writes `bytes` to `path` atomically with mode 0600.
    ///
    /// - Parameters:
    ///   - replacing: whether a file at `path` is replaced; when false the new file is linked
    ///     into place, which fails when one exists, even one made a moment ago by another process
    ///     (a check for the file before writing would not see it).
    ///   - calls: the system's `close` and `fsync` unless a test fails them.
    /// - Throws: `.keyExists` when `replacing` is false and `path` exists; `.storageFailed` (disk
    ///   full, permissions, a failed `close` or `fsync`); the previous file is then untouched,
    ///   except when only the directory's `fsync` failed after the new file took its place, which
    ///   the message says.
    package static func write(
        _ bytes: [UInt8], to path: String, replacing: Bool = true, calls: DurabilityCalls = .system
    ) throws(KeyAuthError) {
        let directory = parentDirectory(of: path)
        removeAbandonedTemporaries(in: directory)
        let suffix = (try? CryptoPrimitives.randomBytes(count: 6)).map { Base64URL.encode($0) } ?? "0"
        let temporary = "\(directory)/\(temporaryPrefix)\(getpid())-\(suffix)"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw errnoError(.storageFailed, "cannot create a file in \(directory)") }
        var written = 0
        var failure: KeyAuthError?
        // The umask can only remove bits; make the mode exactly 0600 whatever it is.
        if fchmod(descriptor, 0o600) != 0 { failure = errnoError(.storageFailed, "cannot set the mode of \(path)") }
        bytes.withUnsafeBytes { buffer in
            while failure == nil && written < buffer.count {
                let result = Glibc.write(descriptor, buffer.baseAddress.map { $0 + written }, buffer.count - written)
                if result < 0 {
                    if errno == EINTR { continue }
                    failure = errnoError(.storageFailed, "cannot write \(path)")
                    return
                }
                written += result
            }
        }
        if failure == nil && calls.fsync(descriptor) != 0 {
            failure = errnoError(.storageFailed, "cannot sync \(path)")
        }
        // Linux closes the descriptor even when close fails; EINTR then loses nothing that the
        // fsync above did not already make durable, but any other error may have lost the data.
        if calls.close(descriptor) != 0 && errno != EINTR && failure == nil {
            failure = errnoError(.storageFailed, "cannot close \(path)")
        }
        if failure == nil && replacing && rename(temporary, path) != 0 {
            failure = errnoError(.storageFailed, "cannot replace \(path)")
        } else if failure == nil && !replacing {
            if link(temporary, path) != 0 {
                failure =
                    errno == EEXIST
                    ? KeyAuthError(.keyExists, "\(path) exists") : errnoError(.storageFailed, "cannot create \(path)")
            } else {
                unlink(temporary)
            }
        }
        if let failure {
            unlink(temporary)
            throw failure
        }
        try syncDirectory(directory, calls: calls, after: "replaced \(path)")
    }

    /// Reads a secret file after checking that nobody else can read or replace it, as OpenSSH
    /// does for private keys.
    ///
    /// - Throws: `.keyNotFound` when missing, `.keyUnprotected` when it is a symlink, not a
    ///   regular file, owned by another user, or has any group or other permission bit, or when
    ///   its directory fails ``checkProtectedDirectory(_:)``.
    package static func readProtected(_ path: String) throws(KeyAuthError) -> [UInt8] {
        let (descriptor, info) = try openRegularFile(path)
        defer { close(descriptor) }
        guard info.st_uid == geteuid() else {
            throw KeyAuthError(.keyUnprotected, "\(path) belongs to another user; refusing to use it")
        }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw KeyAuthError(
                .keyUnprotected,
                "permissions \(String(mode, radix: 8)) for \(path) are too open: it is UNPROTECTED; "
                    + "it must be readable only by you (chmod 600)")
        }
        try checkProtectedDirectory(parentDirectory(of: path))
        return try readToEnd(
            descriptor, limit: 1 << 20, failure: "cannot read \(path)",
            tooLarge: KeyAuthError(.keyCorrupt, "\(path) is too large to be a key"))
    }

    /// Opens `path` for reading, not through a symbolic link, and checks that it is a regular
    /// file; the caller closes the descriptor.
    ///
    /// - Throws: `.keyNotFound` when missing; `.keyUnprotected` for a symbolic link or what is
    ///   not a regular file; `.storageFailed` when it cannot be opened or inspected.
    static func openRegularFile(_ path: String) throws(KeyAuthError) -> (descriptor: Int32, info: stat) {
        // O_NONBLOCK: a FIFO put where the file belongs must be refused below, not wait for a
        // writer; reads of a regular file ignore it.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if descriptor < 0 {
            if errno == ENOENT { throw KeyAuthError(.keyNotFound, "\(path) does not exist") }
            if errno == ELOOP { throw KeyAuthError(.keyUnprotected, "\(path) is a symbolic link; refusing to use it") }
            throw errnoError(.storageFailed, "cannot open \(path)")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let error = errnoError(.storageFailed, "cannot inspect \(path)")
            close(descriptor)
            throw error
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw KeyAuthError(.keyUnprotected, "\(path) is not a regular file; refusing to use it")
        }
        return (descriptor, info)
    }

    /// Reads `descriptor` to its end through a chunk wiped afterwards (the bytes may be a secret).
    ///
    /// - Throws: `tooLarge` past `limit` bytes; `.storageFailed` with `failure` when a read fails.
    static func readToEnd(
        _ descriptor: Int32, limit: Int, failure: String, tooLarge: @autoclosure () -> KeyAuthError
    ) throws(KeyAuthError) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        defer { CryptoPrimitives.wipe(&chunk) }
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw errnoError(.storageFailed, failure)
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
            guard bytes.count <= limit else { throw tooLarge() }
        }
    }

    /// Reads a small file that is not secret but decides something (which account a command
    /// uses): the user's own regular file, not a symlink, that nobody else can write, in a
    /// directory that passes ``checkProtectedDirectory(_:readable:)`` with readers allowed.
    ///
    /// - Parameter limit: the largest size accepted, in bytes.
    /// - Returns: the bytes, or nil when the file (or its directory) does not exist.
    /// - Throws: `.keyUnprotected` for a symlink, a file that is not regular, another user's, or
    ///   writable by others, or a directory that fails the check; `.keyCorrupt` for a file larger
    ///   than `limit`; `.storageFailed` when it cannot be read.
    package static func readOwned(_ path: String, limit: Int) throws(KeyAuthError) -> [UInt8]? {
        let directory = parentDirectory(of: path)
        guard exists(directory) else { return nil }
        try checkProtectedDirectory(directory, readable: true)
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if descriptor < 0 {
            if errno == ENOENT { return nil }
            if errno == ELOOP { throw KeyAuthError(.keyUnprotected, "\(path) is a symbolic link; refusing to use it") }
            throw errnoError(.storageFailed, "cannot open \(path)")
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw errnoError(.storageFailed, "cannot inspect \(path)") }
        guard (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            throw KeyAuthError(
                .keyUnprotected,
                "\(path) is not a regular file of yours that only you can write; refusing to use it")
        }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var count = 0
        while count <= limit {
            let result = bytes.withUnsafeMutableBytes { buffer in
                read(descriptor, buffer.baseAddress.map { $0 + count }, buffer.count - count)
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw errnoError(.storageFailed, "cannot read \(path)")
            }
            if result == 0 { break }
            count += result
        }
        guard count <= limit else { throw KeyAuthError(.keyCorrupt, "\(path) is larger than \(limit) bytes") }
        return Array(bytes[0..<count])
    }

    /// Whether `path` exists (without following a final symlink).
    package static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// Removes `path`; a missing file is not an error.
    ///
    /// - Parameter calls: the system's `close` and `fsync` (of the directory) unless a test fails
    ///   them.
    package static func remove(_ path: String, calls: DurabilityCalls = .system) throws(KeyAuthError) {
        if unlink(path) != 0 {
            guard errno == ENOENT else { throw errnoError(.storageFailed, "cannot remove \(path)") }
            return
        }
        try syncDirectory(parentDirectory(of: path), calls: calls, after: "removed \(path)")
    }

    /// Runs `body` holding an exclusive `flock` on `lockPath`, so that two processes never
    /// interleave a check-then-write on the same state.
    package static func withExclusiveLock<Result>(
        _ lockPath: String, _ body: () throws(KeyAuthError) -> Result
    ) throws(KeyAuthError) -> Result {
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw errnoError(.storageFailed, "cannot open the lock \(lockPath)") }
        defer { close(descriptor) }
        while flock(descriptor, LOCK_EX) != 0 {
            guard errno == EINTR else { throw errnoError(.storageFailed, "cannot lock \(lockPath)") }
        }
        defer { flock(descriptor, LOCK_UN) }
        return try body()
    }

    package static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Makes a rename or unlink in `directory` durable; without it a power cut can undo a
    /// change that the caller already reported done.
    ///
    /// - Parameter done: what already happened, for the message: the change itself stands.
    private static func syncDirectory(
        _ directory: String, calls: DurabilityCalls, after done: String
    ) throws(KeyAuthError) {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw errnoError(.storageFailed, "\(done), but cannot open its directory \(directory) to sync it")
        }
        defer { _ = calls.close(descriptor) }
        guard calls.fsync(descriptor) == 0 else {
            throw errnoError(.storageFailed, "\(done), but cannot sync its directory \(directory)")
        }
    }

    package static func errnoError(_ code: KeyAuthError.Code, _ message: String) -> KeyAuthError {
        let number = errno
        let text = String(cString: strerror(number))
        return KeyAuthError(
            code, "\(message): \(text)", underlying: NativeError(library: "errno", code: Int(number), text: text))
    }
}
