import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// Who may use the agent: only processes of its own user, checked before a byte is read.
extension KeyAgentServer {
    /// Accepts one connection on `listener`, with the socket timeout set, when its peer is the
    /// user; closes it and returns nil otherwise.
    func acceptOwnUser(_ listener: Int32) -> Int32? {
        let connection = accept(listener, nil, nil)
        guard connection >= 0 else { return nil }
        _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
        guard isOwnUser(connection) else {
            close(connection)
            return nil
        }
        KeyAgentSocket.setTimeout(connection, seconds: 5)
        return connection
    }

    /// Whether the peer of `connection` is this user (`SO_PEERCRED`); a refusal is logged.
    func isOwnUser(_ connection: Int32) -> Bool {
        let peer = KeyAgentSocket.peerCredentials(connection)
        guard let peer, peer.uid == KeyAgentSocket.ownUID else {
            let who = peer.map { "uid \($0.uid) in process \($0.pid)" } ?? "an unknown uid"
            errorOutput(
                "keyauth agent: refused a connection from \(who) (only uid \(KeyAgentSocket.ownUID) may use this agent)"
            )
            return false
        }
        return true
    }
}
