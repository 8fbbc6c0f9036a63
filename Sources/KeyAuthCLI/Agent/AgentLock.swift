import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// An exclusive `flock` on `agent.lock` beside the agent's sockets, held for the agent's whole
/// life: one agent per runtime directory.
///
/// Checking that no agent answers and then binding the sockets is two steps, with a PIN prompt
/// between them in the foreground. Two agents started at once (two terminals, or the user unit
/// while `keyauth agent` waits for a PIN) both bound; the second unlinked the first's socket,
/// and the first, unreachable, kept its unlocked key until its timeout, while `--lock` and
/// `--stop` reached only the second. An agent takes this lock before it unlinks or binds
/// anything, and removes the sockets only while it holds it. The file stays: removing a lock
/// file lets a third process lock a new file while the second still holds the old one.
final class AgentLock {
    private let descriptor: Int32

    /// Takes the lock beside `socketPath`, without waiting.
    ///
    /// - Throws: `.agentStartFailed` when another agent holds it, `.storageFailed` when the file
    ///   cannot be opened.
    init(besideSocket socketPath: String) throws(KeyAuthError) {
        let directory = KeyAgentSocket.directoryPath(of: socketPath)
        let path = directory + "/agent.lock"
        let descriptor = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw KeyAuthError(.storageFailed, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(descriptor)
            guard reason == EWOULDBLOCK else {
                throw KeyAuthError(.storageFailed, "cannot lock \(path): \(String(cString: strerror(reason)))")
            }
            throw KeyAuthError(
                .agentStartFailed,
                "another keyauth agent is starting or running in \(directory); "
                    + "`keyauth agent --stop` ends it")
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }
}
