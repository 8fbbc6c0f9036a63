import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// Root's configuration files that decide a host login (`/etc/keyauth/pam-users`,
/// `/etc/keyauth/pam.conf`), read as root before the helper drops to the user.
///
/// The checks are made on the descriptor that is read (`O_NOFOLLOW`, then `fstat`), not on the
/// path before opening it: between a `stat` of the path and an `open`, whoever can write to the
/// directory could put another file there.
enum RootFile {
    /// The most a configuration file may hold.
    static let maximumSize = 1 << 20

    /// The bytes of `path`, or nil when there is no such file.
    ///
    /// - Parameter private: whether nobody but root may read it either (a secret), rather than
    ///   only write it.
    /// - Throws: `.keyUnprotected` for a symbolic link, something other than a regular file, a
    ///   file not owned by root, or one that others may write (or, when `private`, read);
    ///   `.storageFailed` when it cannot be read.
    static func read(_ path: String, private: Bool) throws(KeyAuthError) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            switch errno {
            case ENOENT: return nil
            case ELOOP: throw KeyAuthError(.keyUnprotected, "\(path) is a symbolic link; refusing to read it")
            default: throw KeyAuthError(.storageFailed, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw KeyAuthError(.storageFailed, "cannot inspect \(path): \(String(cString: strerror(errno)))")
        }
        let looser: mode_t = `private` ? 0o077 : 0o022
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == 0, info.st_mode & looser == 0 else {
            throw KeyAuthError(
                .keyUnprotected,
                `private`
                    ? "\(path) must be a regular file of root's with mode 0600"
                    : "\(path) must be a regular file of root's, writable by root only")
        }
        guard info.st_size <= maximumSize else {
            throw KeyAuthError(.storageFailed, "\(path) is larger than \(maximumSize) bytes")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw KeyAuthError(.storageFailed, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            guard bytes.count <= maximumSize else {
                throw KeyAuthError(.storageFailed, "\(path) is larger than \(maximumSize) bytes")
            }
        }
    }
}
