import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The Unix socket under `keyauth agent`: where it lives, and the calls both ends make on it.
///
/// The socket is the agent's only door, so two checks guard it, at both ends: the file system
/// (the socket is 0600 in a 0700 directory of the user's own `$XDG_RUNTIME_DIR`) and the
/// kernel's word on who is at the other end (`SO_PEERCRED`). The agent compares the connecting
/// process's uid with its own on every connection, so that a process that reaches the socket
/// some other way (a loosened mode, a capability) gets nothing; every client checks the files
/// and the listening process's uid before it sends a byte, so that a socket another user put
/// in the path learns no PIN and no signing request (`KeyAgentSocket+Ownership.swift`).
package enum KeyAgentSocket {
    /// The largest message either end accepts: a signing input is a few kilobytes at most.
    package static let maximumMessageLength = 64 * 1024

    /// `$XDG_RUNTIME_DIR/keyauth`, the agent's private directory.
    ///
    /// - Throws: `.invalidArgument` when `XDG_RUNTIME_DIR` is unset or relative: no other
    ///   directory is both private to the user and cleared at logout, and a socket in `/tmp`
    ///   would invite the races ssh-agent had to defend against. The message says where the
    ///   directory usually is (``runtimeDirectoryHint(uid:exists:)``).
    package static func directory(environment: [String: String]) throws(KeyAuthError) -> String {
        guard let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") else {
            let uid = geteuid()
            throw KeyAuthError(
                .invalidArgument,
                "keyauth agent needs XDG_RUNTIME_DIR (the per-user runtime directory a login session sets up); "
                    + "it is not set, so there is no private place for the agent's socket; "
                    + runtimeDirectoryHint(uid: uid, exists: isOwnDirectory("/run/user/\(uid)", uid: uid)))
        }
        return (runtime.hasSuffix("/") ? String(runtime.dropLast()) : runtime) + "/keyauth"
    }

    /// Where the runtime directory usually is: systemd's `/run/user/UID`, made at login by
    /// `pam_systemd` (a `su` or `sudo` shell, a cron job or a container often lacks the variable
    /// while the directory is there).
    package static func runtimeDirectoryHint(uid: uid_t, exists: Bool) -> String {
        let directory = "/run/user/\(uid)"
        if exists { return "yours is \(directory): export XDG_RUNTIME_DIR=\(directory)" }
        return "a login session usually makes \(directory) (pam_systemd); log in again, "
            + "or run `loginctl enable-linger` to keep one"
    }

    /// Whether `path` is a directory (not a symbolic link) owned by `uid`.
    private static func isOwnDirectory(_ path: String, uid: uid_t) -> Bool {
        var information = stat()
        guard lstat(path, &information) == 0 else { return false }
        return information.st_mode & S_IFMT == S_IFDIR && information.st_uid == uid
    }

    /// The agent's socket path: `$XDG_RUNTIME_DIR/keyauth/agent.sock`.
    package static func path(environment: [String: String]) throws(KeyAuthError) -> String {
        try directory(environment: environment) + "/agent.sock"
    }

    /// The ssh-agent socket in the same directory as the agent's socket at `socketPath`:
    /// `$XDG_RUNTIME_DIR/keyauth/ssh-agent.sock`, for `SSH_AUTH_SOCK` or ssh's `IdentityAgent`.
    package static func sshAgentPath(besides socketPath: String) -> String {
        directoryPath(of: socketPath) + "/ssh-agent.sock"
    }

    /// Makes a `sockaddr_un` for `path` and lends it to `body`.
    private static func withAddress<Result>(
        _ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result
    ) -> Result? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    /// Connects to the agent at `path` once it is shown to be the user's own, before anything is
    /// sent: see ``checkFiles(of:lead:)`` and ``checkPeer(_:lead:)``.
    ///
    /// - Returns: the connected descriptor; nil when no agent is there (no directory, no socket,
    ///   or a socket that nothing listens on, left by an agent that was killed).
    /// - Throws: `.agentUntrusted` naming what is wrong. Callers stop there rather than go on
    ///   without the agent: someone put it there, and the user should learn of it.
    package static func connect(to path: String) throws(KeyAuthError) -> Int32? {
        let lead = "refusing the agent at \(path) (nothing was sent to it)"
        guard try checkFiles(of: path, lead: lead) else { return nil }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        let connected = withAddress(path) { Glibc.connect(descriptor, $0, $1) } ?? -1
        guard connected == 0 else {
            close(descriptor)
            return nil
        }
        do {
            try checkPeer(descriptor, lead: lead)
        } catch {
            close(descriptor)
            throw error
        }
        setTimeout(descriptor, seconds: Int(clientWait.components.seconds))
        return descriptor
    }

    /// Binds a listening socket at `path` with mode 0600 (set through the umask, so that no
    /// moment exists when it is more open).
    ///
    /// - Throws: `.storageFailed` with the system's reason.
    package static func listen(at path: String) throws(KeyAuthError) -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw systemError("cannot create the agent's socket") }
        let previousMask = umask(0o177)
        let bound = withAddress(path) { bind(descriptor, $0, $1) } ?? -1
        let bindError = errno
        umask(previousMask)
        guard bound == 0, chmod(path, 0o600) == 0, Glibc.listen(descriptor, 16) == 0 else {
            close(descriptor)
            errno = bindError
            throw systemError("cannot listen on \(path)")
        }
        return descriptor
    }

    /// The process at the other end and its effective uid, as the kernel recorded them when it
    /// called `connect` (on the agent's side) or `listen` (on a client's side).
    package static func peerCredentials(_ descriptor: Int32) -> (pid: pid_t, uid: uid_t)? {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; }, which Glibc's Swift overlay lacks.
        var credentials: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
            Int(length) == MemoryLayout.size(ofValue: credentials)
        else { return nil }
        return (credentials.0, credentials.1)
    }

    /// The process id of the agent listening at `path`, after the same checks as
    /// ``connect(to:)``; nil when no agent is there. `keyauth agent --background` prints it,
    /// as `ssh-agent` prints its own.
    package static func agentProcessID(at path: String) throws(KeyAuthError) -> pid_t? {
        guard let descriptor = try connect(to: path) else { return nil }
        defer { close(descriptor) }
        return peerCredentials(descriptor)?.pid
    }

    /// Bounds a read or write on `descriptor`, so that a peer that stalls cannot hold the agent.
    package static func setTimeout(_ descriptor: Int32, seconds: Int) {
        var limit = timeval(tv_sec: seconds, tv_usec: 0)
        let size = socklen_t(MemoryLayout<timeval>.size)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &limit, size)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &limit, size)
    }

    /// Writes one message: a 4-byte big-endian length, then the bytes; false when the peer has
    /// gone, which raises no SIGPIPE.
    package static func writeMessage(_ descriptor: Int32, _ message: [UInt8]) -> Bool {
        message.withUnsafeBytes { writeMessage(descriptor, buffer: $0) }
    }

    /// Writes one message from `buffer` without copying it, which is how a PIN is sent: the
    /// only copy stays where its owner wipes it.
    package static func writeMessage(_ descriptor: Int32, buffer: UnsafeRawBufferPointer) -> Bool {
        guard buffer.count <= maximumMessageLength else { return false }
        let length = UInt32(buffer.count)
        let prefix: [UInt8] = [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: length >> $0) }
        return DescriptorIO.sendAll(descriptor, bytes: prefix) && DescriptorIO.sendAll(descriptor, buffer: buffer)
    }

    /// Reads one message written by ``writeMessage(_:_:)``; nil at end of stream, when the whole
    /// message has not come by `deadline`, or for a length above ``maximumMessageLength``. The
    /// bytes arrive in the one array returned, so a caller that wipes it wipes every copy this
    /// read made.
    ///
    /// The deadline is the message's, not each read's: a socket timeout starts again with every
    /// byte, so a peer sending one byte every few seconds held the agent's single loop for as long
    /// as it liked, and `--lock` or `--stop` with it.
    package static func readMessage(
        _ descriptor: Int32, deadline: ContinuousClock.Instant = .now + messageTime
    ) -> [UInt8]? {
        guard let prefix = readExactly(descriptor, count: 4, deadline: deadline) else { return nil }
        let length = prefix.reduce(0) { ($0 << 8) | Int($1) }
        guard length <= maximumMessageLength else { return nil }
        return readExactly(descriptor, count: length, deadline: deadline)
    }

    /// How long a whole message may take to arrive at the agent.
    package static let messageTime = Duration.seconds(5)
    /// How long a client waits for the agent's answer (a TPM's signature, an unlock's scrypt).
    package static let clientWait = Duration.seconds(30)

    /// Waits until `descriptor` can be read, or `deadline` passes; false then, or on an error.
    package static func awaitInput(_ descriptor: Int32, before deadline: ContinuousClock.Instant) -> Bool {
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return false }
            var watched = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&watched, 1, left.millisecondsRoundedUp)
            if ready < 0 && errno == EINTR { continue }
            return ready > 0
        }
    }

    private static func readExactly(_ descriptor: Int32, count: Int, deadline: ContinuousClock.Instant) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let got =
                awaitInput(descriptor, before: deadline)
                ? buffer.withUnsafeMutableBytes { raw in
                    read(descriptor, raw.baseAddress.map { $0 + filled }, count - filled)
                }
                : 0
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else {
                // What arrived may be part of a PIN frame.
                CryptoPrimitives.wipe(&buffer)
                return nil
            }
            filled += got
        }
        return buffer
    }

    /// A `.storageFailed` error with `strerror(errno)`.
    package static func systemError(_ what: String) -> KeyAuthError {
        KeyAuthError(.storageFailed, "\(what): \(String(cString: strerror(errno)))")
    }
}
