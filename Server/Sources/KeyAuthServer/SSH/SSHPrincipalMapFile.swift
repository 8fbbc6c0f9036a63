import KeyAuth
import Synchronization

/// The `--ssh-principals-file` a server issues with, read at start and again at each periodic
/// cleanup, so that an edit takes effect within `--cleanup-interval` without a restart.
final class SSHPrincipalMapFile: Sendable {
    /// The file.
    let path: String
    private let map: Mutex<SSHPrincipalMap>
    private let changes = Atomic<UInt64>(0)

    /// Reads the file.
    ///
    /// - Throws: `KeyAuthError` as ``SSHPrincipalMap/load(file:)`` throws it.
    init(path: String) throws(KeyAuthError) {
        self.path = path
        map = Mutex(try SSHPrincipalMap.load(file: path))
    }

    /// The rules as last read.
    var current: SSHPrincipalMap { map.withLock { $0 } }

    /// How many times a read found other rules than the one before: the revocation list, which
    /// depends on the rules, is built again when this moves.
    var generation: UInt64 { changes.load(ordering: .acquiring) }

    /// Reads the file again; a file that cannot be read or parsed leaves the rules read before.
    ///
    /// - Throws: `KeyAuthError` of the failed read, for the caller to log.
    func reload() throws(KeyAuthError) {
        let fresh = try SSHPrincipalMap.load(file: path)
        let changed = map.withLock { map in
            defer { map = fresh }
            return map != fresh
        }
        if changed { changes.add(1, ordering: .releasing) }
    }
}
