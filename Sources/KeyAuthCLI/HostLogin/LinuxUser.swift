#if canImport(Glibc)
    import Glibc
#endif

/// A Linux account from the password database, and the one way the helper gives up root for it.
struct LinuxUser: Sendable {
    /// The name as the password database spells it (`pw_name`).
    let name: String
    let uid: uid_t
    let gid: gid_t
    let homeDirectory: String

    /// Looks `name` up; nil when there is no such user (or the lookup failed).
    ///
    /// ``name`` is the database's spelling, which a name service that ignores case (SSSD,
    /// winbind) may give for another spelling of `name`: the mapping file and the server's
    /// `keyauth_user` check must see that one, or `ALICE` would be mapped apart from `alice`.
    init?(name: String) {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &found) == 0, found != nil,
            let directory = entry.pw_dir, let canonical = entry.pw_name
        else { return nil }
        self.name = String(cString: canonical)
        self.uid = entry.pw_uid
        self.gid = entry.pw_gid
        self.homeDirectory = String(cString: directory)
    }

    /// Takes on the user's uid, gid and groups for good, so that the user's files are read with
    /// the user's rights (a symbolic link the user planted reaches only what the user can), and
    /// the files a login writes (the token, the PIN attempt counter) stay the user's own.
    ///
    /// - Returns: nil on success, else why the helper must stop. Running as the user already
    ///   (a test, or `sudo -u`) is fine; running as someone else is refused.
    func becomeUser() -> String? {
        if geteuid() != 0 {
            return geteuid() == uid ? nil : "keyauth-pam-helper runs as uid \(geteuid()), neither root nor \(name)"
        }
        guard initgroups(name, gid) == 0, setgid(gid) == 0, setuid(uid) == 0 else {
            return "cannot switch to user \(name): \(String(cString: strerror(errno)))"
        }
        // setuid from root to a user is permanent; check it, as a failure here would be silent.
        guard getuid() == uid, geteuid() == uid, uid == 0 || setuid(0) != 0 else {
            return "switching to user \(name) did not drop root"
        }
        return nil
    }

    /// A home template with `~/` as the home directory and `%u` as the user name.
    func expand(_ template: String) -> String {
        var path = template.replacingOccurrences(of: "%u", with: name)
        if path == "~" || path.hasPrefix("~/") { path = homeDirectory + path.dropFirst() }
        return path
    }
}
