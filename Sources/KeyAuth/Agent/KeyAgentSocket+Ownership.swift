import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What makes a socket the user's own agent, checked by every client before it sends a byte and
/// by the agent before it listens.
///
/// A client that sends its PIN or a signing request to whatever listens on the socket path
/// tells a rogue listener of another user (one that set up `keyauth/` first in a runtime
/// directory it can write) what it asks. So the path must lead, without symbolic links, through
/// a directory of the user's own uid with no group or other permission bits, to a socket of
/// that uid; and after `connect`, `SO_PEERCRED` must name that uid for the process listening.
/// The file checks explain early what is wrong; the peer check settles it, since files can be
/// swapped between a check and `connect`, and a file's owner says nothing about who listens.
extension KeyAgentSocket {
    /// The uid that the agent and its clients share: the effective one, which the kernel records
    /// as a new file's owner and as a socket peer's credentials.
    package static var ownUID: uid_t { geteuid() }

    /// What a path's last component is, seen without following it.
    private enum Entry {
        /// Nothing is there.
        case absent
        /// A directory or socket, as asked, of the user's own uid (and private when asked).
        case own
        /// Anything else, and why in a few words.
        case refused(String)
    }

    /// Checks the directory that holds `socketPath`, then the socket file.
    ///
    /// - Returns: false when either is absent (no agent runs), true when both are the user's own.
    /// - Throws: `.agentUntrusted` with `lead` and the reason.
    static func checkFiles(of socketPath: String, lead: String) throws(KeyAuthError) -> Bool {
        let directory = directoryPath(of: socketPath)
        for (path, type) in [(directory, S_IFDIR), (socketPath, S_IFSOCK)] {
            switch entry(at: path, type: type) {
            case .absent: return false
            case .own: continue
            case .refused(let reason): throw KeyAuthError(.agentUntrusted, "\(lead): \(reason)")
            }
        }
        return true
    }

    /// Checks with `SO_PEERCRED` that the process listening on `descriptor` runs as the user.
    ///
    /// - Throws: `.agentUntrusted` with `lead` and the listener's uid and pid.
    static func checkPeer(_ descriptor: Int32, lead: String) throws(KeyAuthError) {
        guard let peer = peerCredentials(descriptor) else {
            throw KeyAuthError(.agentUntrusted, "\(lead): the kernel does not say which user runs it")
        }
        guard peer.uid == ownUID else {
            throw KeyAuthError(
                .agentUntrusted,
                "\(lead): it runs as uid \(peer.uid), not as you (uid \(ownUID)), in process \(peer.pid)")
        }
    }

    /// Creates the agent's directory for `socketPath` (0700), or accepts an existing one only
    /// when it is the user's own and private; another user's directory is never changed.
    ///
    /// - Throws: `.agentUntrusted` for a directory that is not; `.storageFailed` when it cannot be
    ///   created (its parent, `XDG_RUNTIME_DIR`, missing or not writable).
    package static func prepareDirectory(for socketPath: String) throws(KeyAuthError) {
        let directory = directoryPath(of: socketPath)
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw systemError("cannot create \(directory)")
        }
        if case .refused(let reason) = entry(at: directory, type: S_IFDIR) {
            throw KeyAuthError(
                .agentUntrusted,
                "cannot start an agent at \(socketPath): \(reason); remove it, or set XDG_RUNTIME_DIR to your own "
                    + "runtime directory")
        }
    }

    /// What is at `path`, by `lstat`: a `type` (`S_IFDIR` or `S_IFSOCK`) owned by the user, a
    /// directory also without group or other permission bits.
    private static func entry(at path: String, type: mode_t) -> Entry {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            // ENOTDIR: XDG_RUNTIME_DIR names a file, under which nothing can listen either.
            if errno == ENOENT || errno == ENOTDIR { return .absent }
            return .refused("cannot examine \(path): \(String(cString: strerror(errno)))")
        }
        let name = type == S_IFDIR ? "directory" : "socket"
        switch info.st_mode & S_IFMT {
        case S_IFLNK: return .refused("\(path) is a symbolic link, not a \(name)")
        case type: break
        default: return .refused("\(path) is not a \(name)")
        }
        guard info.st_uid == ownUID else {
            return .refused("\(path) belongs to uid \(info.st_uid), not to you (uid \(ownUID))")
        }
        let mode = info.st_mode & 0o7777
        if type == S_IFDIR && mode & 0o077 != 0 {
            return .refused(
                "\(path) has group or other permissions (mode 0\(String(mode, radix: 8))), where 0700 is expected")
        }
        return .own
    }

    /// The directory part of `path` (`/run/user/1000/keyauth` of `.../keyauth/agent.sock`).
    package static func directoryPath(of path: String) -> String {
        String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    }
}
