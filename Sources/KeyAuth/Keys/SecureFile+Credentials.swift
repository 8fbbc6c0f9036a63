import Glibc

extension SecureFile {
    /// Reads a secret file as ``readProtected(_:)`` does, or, when it lies directly in systemd's
    /// credentials directory (`credentialsDirectory`, the service's `$CREDENTIALS_DIRECTORY`),
    /// as systemd hands it over there.
    ///
    /// systemd 254 and later copy a `LoadCredential=` file into a read-only directory of the
    /// service's own, owned by root, and grant the service's user read access through an ACL, so
    /// that the file shows as root's with mode 0440 (the group bits being the ACL's mask). The
    /// strict rule would refuse it although no one but root and the service can read it. There
    /// the file must belong to root or this process's user, have no bit for others and no write
    /// or execute bit for the group; the directory must belong to root or this user and be
    /// writable by neither group nor others.
    ///
    /// - Throws: as ``readProtected(_:)``.
    package static func readSecret(_ path: String, credentialsDirectory: String?) throws(KeyAuthError) -> [UInt8] {
        guard let credentialsDirectory, !credentialsDirectory.isEmpty,
            parentDirectory(of: path) == stripTrailingSlashes(credentialsDirectory)
        else { return try readProtected(path) }
        let (descriptor, file) = try openRegularFile(path)
        defer { close(descriptor) }
        guard
            isCredentialFile(
                owner: file.st_uid, group: file.st_gid, mode: file.st_mode, user: geteuid(), userGroup: getegid())
        else {
            throw KeyAuthError(
                .keyUnprotected,
                "\(path) in the credentials directory must belong to root or you and be readable by no one "
                    + "else (its mode is \(String(file.st_mode & 0o7777, radix: 8)))")
        }
        var directory = stat()
        let parent = parentDirectory(of: path)
        guard lstat(parent, &directory) == 0 else { throw errnoError(.storageFailed, "cannot inspect \(parent)") }
        guard isCredentialDirectory(owner: directory.st_uid, mode: directory.st_mode, user: geteuid()) else {
            throw KeyAuthError(
                .keyUnprotected, "the credentials directory \(parent) may be changed by another user; refusing it")
        }
        return try readToEnd(
            descriptor, limit: 1 << 20, failure: "cannot read \(path)",
            tooLarge: KeyAuthError(.keyCorrupt, "\(path) is too large to be a key"))
    }

    /// Whether a credential file's owner and mode are what systemd gives one: root's or `user`'s,
    /// nothing for others, the group bits (an ACL's mask) at most read, and a group that may read
    /// it root's or `userGroup`.
    package static func isCredentialFile(
        owner: uid_t, group: gid_t, mode: mode_t, user: uid_t, userGroup: gid_t
    ) -> Bool {
        (owner == 0 || owner == user) && mode & 0o137 == 0
            && (mode & 0o040 == 0 || group == 0 || group == userGroup)
    }

    /// Whether a credentials directory is root's or `user`'s, a directory, and writable by no one else.
    package static func isCredentialDirectory(owner: uid_t, mode: mode_t, user: uid_t) -> Bool {
        (mode & S_IFMT) == S_IFDIR && (owner == 0 || owner == user) && mode & 0o022 == 0
    }

    private static func stripTrailingSlashes(_ path: String) -> String {
        var path = Substring(path)
        while path.count > 1, path.hasSuffix("/") { path = path.dropLast() }
        return String(path)
    }
}
