import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The host's root-only store of one Linux user's offline grant (docs/HOST-LOGIN.md, "Offline"):
/// `/var/lib/keyauth-pam/USER.grant`, 0600 in a 0700 directory, both root's, holding the grant,
/// the server it came from and that server's JWK set as the grant's login fetched it.
///
/// The privilege split: ``open(linuxUser:directory:)`` runs while `keyauth-pam-helper` is still
/// root, before it takes on the user's uid. It checks the directory and the file (refused when
/// looser or not root's), reads what the file holds, and keeps the file open for writing. The
/// part running as the user then has this one descriptor and nothing else: it can renew or empty
/// this user's grant (``save(_:)``, ``clear()``), never read or write another user's, and the
/// user cannot reach the descriptor (the helper is not dumpable after its uid change, so
/// `/proc/PID/fd` and ptrace are closed to the user). The JWK set is per user for the same
/// reason: a shared one would let one user's helper choose the keys another user's grant is
/// checked with.
final class OfflineGrantStore {
    /// The store's directory on every host.
    static let directory = "/var/lib/keyauth-pam"
    /// The most a grant file may hold: a grant and a JWK set of a few keys take a few KiB.
    static let maximumLength = 65_536

    /// The grant file.
    let path: String
    /// What the file held when it was opened: nil when it was empty (no grant yet, or emptied).
    let stored: StoredOfflineGrant?
    /// Why the stored record could not be read, when it could not (a damaged file).
    let unreadable: String?
    private let descriptor: Int32

    private init(path: String, descriptor: Int32, stored: StoredOfflineGrant?, unreadable: String?) {
        self.path = path
        self.descriptor = descriptor
        self.stored = stored
        self.unreadable = unreadable
    }

    deinit {
        close(descriptor)
    }

    /// Opens (creating when missing) the grant file of `linuxUser`, as root.
    ///
    /// - Throws: `.keyUnprotected` when the directory or the file is not root's, is reachable
    ///   by group or others, is a link, or the file has other names; `.invalidArgument` for a
    ///   user name that cannot be a file name; `.storageFailed` when the directory or the file cannot
    ///   be made or read.
    static func open(linuxUser: String, directory: String = directory) throws(KeyAuthError) -> OfflineGrantStore {
        guard !linuxUser.isEmpty, !linuxUser.contains("/"), !linuxUser.hasPrefix("."),
            !linuxUser.unicodeScalars.contains(where: { $0.value < 0x20 })
        else { throw KeyAuthError(.invalidArgument, "the user name \(linuxUser) cannot name a grant file") }
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw SecureFile.errnoError(.storageFailed, "cannot make \(directory)")
        }
        var status = stat()
        guard lstat(directory, &status) == 0 else {
            throw SecureFile.errnoError(.storageFailed, "cannot read \(directory)")
        }
        guard status.st_mode & S_IFMT == S_IFDIR, status.st_uid == 0, status.st_mode & 0o077 == 0 else {
            throw KeyAuthError(
                .keyUnprotected, "\(directory) must be a directory of root's, mode 0700, for offline grants")
        }
        let path = directory + "/" + linuxUser + ".grant"
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw SecureFile.errnoError(.storageFailed, "cannot open \(path)") }
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == 0,
            status.st_mode & 0o077 == 0, status.st_nlink == 1
        else {
            close(descriptor)
            throw KeyAuthError(.keyUnprotected, "\(path) must be a file of root's, mode 0600, with no other names")
        }
        let bytes: [UInt8]
        do {
            bytes = try readAll(descriptor, path: path)
        } catch {
            close(descriptor)
            throw error
        }
        var stored: StoredOfflineGrant?
        var unreadable: String?
        if !bytes.isEmpty {
            do {
                stored = try StoredOfflineGrant(json: bytes)
            } catch {
                unreadable = "\(path) is damaged: \(error.message)"
            }
        }
        return OfflineGrantStore(path: path, descriptor: descriptor, stored: stored, unreadable: unreadable)
    }

    /// Replaces the file's content with `record`.
    ///
    /// Written in place through the descriptor opened as root (the user's uid cannot rename in
    /// the directory): a write cut short leaves a file that does not parse, which counts as no
    /// grant, so the failure is a refused offline login, never a wrong acceptance.
    ///
    /// - Throws: `.storageFailed` when the write fails; `.invalidArgument`, before anything is
    ///   written, when the record is longer than the store reads back (a server's JWK set of
    ///   many large keys): stored, it would make the file unreadable, so that no later login
    ///   could replace or clear it.
    func save(_ record: StoredOfflineGrant) throws(KeyAuthError) {
        let bytes = record.jsonBytes
        guard bytes.count <= Self.maximumLength else {
            throw KeyAuthError(
                .invalidArgument,
                "the offline grant with the server's keys takes \(bytes.count) bytes, more than \(Self.maximumLength)")
        }
        try replace(with: bytes)
    }

    /// Empties the file, so that no offline login uses its grant any more (the server refused
    /// the device). An empty file is the store's "no grant".
    func clear() throws(KeyAuthError) {
        try replace(with: [])
    }

    private func replace(with bytes: [UInt8]) throws(KeyAuthError) {
        guard ftruncate(descriptor, 0) == 0, lseek(descriptor, 0, SEEK_SET) == 0 else {
            throw SecureFile.errnoError(.storageFailed, "cannot empty \(path)")
        }
        guard DescriptorIO.writeAll(descriptor, bytes: bytes) else {
            throw SecureFile.errnoError(.storageFailed, "cannot write \(path)")
        }
        guard fsync(descriptor) == 0 else { throw SecureFile.errnoError(.storageFailed, "cannot sync \(path)") }
    }

    private static func readAll(_ descriptor: Int32, path: String) throws(KeyAuthError) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw SecureFile.errnoError(.storageFailed, "cannot read \(path)") }
            if count == 0 { return bytes }
            bytes += buffer[0..<count]
            guard bytes.count <= maximumLength else {
                throw KeyAuthError(.invalidArgument, "\(path) is longer than \(maximumLength) bytes")
            }
        }
    }
}

/// What a grant file holds: the grant, the server (as root's `server=` names it) whose login
/// renewed it, and that server's JWK set, fetched at the same login, which the grant is checked
/// against offline.
struct StoredOfflineGrant: Equatable, Sendable {
    var server: String
    var grant: String
    /// The JWK set document as the server published it.
    var keySet: JSONValue

    init(server: String, grant: String, keySet: JSONValue) {
        self.server = server
        self.grant = grant
        self.keySet = keySet
    }

    /// Reads a grant file's JSON.
    ///
    /// - Throws: `.invalidArgument` when it is not `{"server":...,"grant":...,"jwks":{...}}`.
    init(json bytes: [UInt8]) throws(KeyAuthError) {
        guard let object = try? JSONValue(parsing: bytes), let server = object["server"]?.stringValue,
            let grant = object["grant"]?.stringValue, let keySet = object["jwks"], keySet.objectValue != nil
        else { throw KeyAuthError(.invalidArgument, "not a JSON object of server, grant and jwks") }
        self.init(server: server, grant: grant, keySet: keySet)
    }

    /// The file's bytes.
    var jsonBytes: [UInt8] {
        JSONValue.object(["server": .string(server), "grant": .string(grant), "jwks": keySet]).serializedBytes(
            leadingKeys: ["server", "grant"])
    }
}
