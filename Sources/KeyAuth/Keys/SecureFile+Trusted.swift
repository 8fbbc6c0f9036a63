import Glibc

extension SecureFile {
    /// Reads a file that is not secret but decides whom the server trusts (the SSH principals,
    /// the TPM makers' roots): a regular file, not a symbolic link, that belongs to root or to
    /// this process's user and that neither group nor others can write. Anyone else who could
    /// change it could make the server trust them.
    ///
    /// - Parameters:
    ///   - label: what the file is, at the start of every message ("--tpm-ca").
    ///   - limit: the largest size accepted, in bytes.
    /// - Throws: `.keyNotFound` when it does not exist; `.keyUnprotected` for a symbolic link, a
    ///   file that is not regular (a FIFO is refused, not waited on), or one another user could
    ///   change; `.invalidArgument` when larger than `limit`; `.storageFailed` when unreadable.
    package static func readTrusted(_ path: String, label: String, limit: Int) throws(KeyAuthError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else {
            switch errno {
            case ENOENT: throw KeyAuthError(.keyNotFound, "\(label): \(path) does not exist")
            case ELOOP: throw KeyAuthError(.keyUnprotected, "\(label): \(path) is a symbolic link")
            default: throw errnoError(.storageFailed, "\(label): cannot open \(path)")
            }
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            throw KeyAuthError(.keyUnprotected, "\(label): \(path) is not a regular file")
        }
        try requireTrustedOwner(info, path: path, label: label)
        let size = limit % (1 << 20) == 0 ? "\(limit >> 20) MiB" : "\(limit) bytes"
        return try readToEnd(
            descriptor, limit: limit, failure: "\(label): cannot read \(path)",
            tooLarge: KeyAuthError(.invalidArgument, "\(label): \(path) is larger than \(size)"))
    }

    /// Checks a directory of such files as ``readTrusted(_:label:limit:)`` checks a file: whoever
    /// could write to it could add a file of their own.
    ///
    /// - Throws: `.keyUnprotected` for a directory another user could change; `.storageFailed`
    ///   when it cannot be inspected.
    package static func checkTrustedDirectory(_ path: String, label: String) throws(KeyAuthError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw errnoError(.storageFailed, "\(label): cannot inspect \(path)") }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw KeyAuthError(.keyUnprotected, "\(label): \(path) is not a directory")
        }
        try requireTrustedOwner(info, path: path, label: label)
    }

    private static func requireTrustedOwner(_ info: stat, path: String, label: String) throws(KeyAuthError) {
        guard info.st_uid == 0 || info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            throw KeyAuthError(
                .keyUnprotected,
                "\(label): \(path) may be changed by another user (it must belong to root or the "
                    + "server's user and not be writable by group or others)")
        }
    }
}
