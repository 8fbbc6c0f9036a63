/// Keeps one device key pair on disk: created once, loaded on every login, removed on reset.
///
/// The private key is PKCS#8 PEM in a 0700 directory with mode 0600, encrypted with the PIN when
/// there is one (``PINKeyEncryption/standard``: scrypt). The public key sits beside it so that
/// `pubkey` and `status` need no PIN.
/// Writes are atomic and serialised by an exclusive lock, so two processes registering at once
/// never leave two keys, and a process killed mid-write leaves the previous state intact.
public struct KeyPairStore: Sendable {
    /// The directory that holds the key files.
    public let directory: String

    /// The shortest PIN a new key file accepts, in characters.
    ///
    /// A copied key file can be guessed offline, beyond the reach of the attempt counter: at
    /// about a third of a second per guess on one core, the 10^4 four-digit PINs fall in under
    /// an hour, the 10^6 six-digit ones take months of core time.
    public static let minimumPINLength = 6

    /// - Parameter directory: created with mode 0700 on first write.
    public init(directory: String) {
        self.directory = directory
    }

    /// The store an app keeps its device key in by default: `$XDG_DATA_HOME/<appName>/key`, or
    /// `$HOME/.local/share/<appName>/key` when `XDG_DATA_HOME` is unset or relative (as the XDG
    /// specification requires).
    ///
    /// - Parameters:
    ///   - appName: the app's directory name: letters, digits, `.`, `_` and `-`, not starting
    ///     with a dot, so that it stays one directory under the data home.
    ///   - environment: the process environment (`ProcessInfo.processInfo.environment`).
    /// - Throws: `.invalidArgument` for another app name; `.storageFailed` when neither
    ///   `XDG_DATA_HOME` nor `HOME` gives a directory.
    public static func `default`(appName: String, environment: [String: String]) throws(KeyAuthError)
        -> KeyPairStore
    {
        let scalars = appName.unicodeScalars
        guard (1...128).contains(scalars.count), scalars.first != ".",
            scalars.allSatisfy({
                $0.isASCII
                    && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
            })
        else {
            throw KeyAuthError(.invalidArgument, "\"\(appName)\" is not a usable app directory name")
        }
        let dataHome: String
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            dataHome = data
        } else if let home = environment["HOME"], home.hasPrefix("/") {
            dataHome = home + "/.local/share"
        } else {
            throw KeyAuthError(.storageFailed, "cannot find a data directory: set XDG_DATA_HOME or HOME")
        }
        return KeyPairStore(directory: dataHome + "/" + appName + "/key")
    }

    /// The private key file.
    public var privateKeyPath: String { directory + "/device-key.pem" }
    /// The public key file (SPKI PEM).
    public var publicKeyPath: String { directory + "/device-key.pub" }
    private var lockPath: String { directory + "/.lock" }
    /// Where ``PINPresence`` counts wrong PINs for this key (its lock file sits beside it).
    public var pinAttemptsPath: String { directory + "/pin-attempts" }
    /// Files beside the key that belong to it and go when it goes.
    static let keyMetadataFiles = ["pin-attempts", "pin-attempts.lock"]

    /// Whether a private key file exists (it may still be unreadable or corrupt).
    public var hasKey: Bool { SecureFile.exists(privateKeyPath) }

    /// Generates and stores a new key pair.
    ///
    /// Generation happens outside the lock (it takes a second for 3072 bits); the check that no
    /// key exists and the write happen under it.
    ///
    /// - Parameters:
    ///   - bits: 2048, 3072 or 4096.
    ///   - pin: when given, the private key is stored encrypted with it.
    /// - Throws: `.keyExists` when another key is already stored (perhaps by a concurrent
    ///   process), `.storageFailed` when the files cannot be written.
    @discardableResult
    public func createKey(bits: Int = 3072, pin: SecretBytes? = nil) throws(KeyAuthError) -> RSAPrivateKey {
        let key = try RSAPrivateKey.generate(bits: bits)
        try store(key, pin: pin)
        return key
    }

    /// Stores an existing key pair (generated elsewhere, or imported).
    ///
    /// - Throws: `.keyExists` when a key is already stored.
    public func store(_ key: RSAPrivateKey, pin: SecretBytes? = nil) throws(KeyAuthError) {
        try SecureFile.createDirectory(directory)
        var privatePEM = try key.pkcs8PEM(pin: pin)
        defer { CryptoPrimitives.wipe(&privatePEM) }
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            guard !hasKey else {
                throw KeyAuthError(.keyExists, "a device key already exists in \(directory)")
            }
            // Public first: the private file's existence is what marks a key as present.
            try SecureFile.write(Array(key.publicKey.pemRepresentation.utf8), to: publicKeyPath)
            try SecureFile.write(privatePEM, to: privateKeyPath)
        }
    }

    /// Whether the stored private key is encrypted with a PIN.
    public func isEncrypted() throws(KeyAuthError) -> Bool {
        var pem = try SecureFile.readProtected(privateKeyPath)
        defer { CryptoPrimitives.wipe(&pem) }
        return RSAPrivateKey.isEncryptedPEM(pem)
    }

    /// Loads the private key, decrypting it with `pin` when it is encrypted.
    ///
    /// A key file encrypted otherwise than with ``PINKeyEncryption/standard`` (PBKDF2, as
    /// keyauth wrote before scrypt) is re-encrypted with it once the PIN has proved right, so
    /// that an older file does not stay cheaper to guess offline. That rewrite is atomic, checked
    /// by decrypting the new file before it replaces the old one, and best effort: when it fails
    /// (a full disk) the old file stays and the next login tries again.
    ///
    /// - Throws: `.keyNotFound`, `.keyUnprotected` (file mode, owner, symlink), `.keyCorrupt`
    ///   (truncated or not a key, or not matching the stored public key), `.wrongPIN`.
    public func loadPrivateKey(pin: SecretBytes? = nil) throws(KeyAuthError) -> RSAPrivateKey {
        var pem = try SecureFile.readProtected(privateKeyPath)
        defer { CryptoPrimitives.wipe(&pem) }
        let key = try decode(pem, pin: pin)
        if let pin, RSAPrivateKey.isEncryptedPEM(pem), RSAPrivateKey.pinEncryption(ofPEM: pem) != .standard {
            try? reencrypt(key, pin: pin, replacing: pem)
        }
        return key
    }

    /// Parses (and decrypts) a private key PEM and checks it against the stored public key.
    private func decode(_ pem: [UInt8], pin: SecretBytes?) throws(KeyAuthError) -> RSAPrivateKey {
        guard !pem.isEmpty else { throw KeyAuthError(.keyCorrupt, "\(privateKeyPath) is empty") }
        let key: RSAPrivateKey
        do throws(KeyAuthError) {
            if let pin {
                key = try RSAPrivateKey(pemRepresentation: pem, pin: pin)
            } else {
                key = try RSAPrivateKey(pemRepresentation: pem)
            }
        } catch {
            guard error.code == .keyCorrupt || error.code == .keyRejected else { throw error }
            throw KeyAuthError(.keyCorrupt, "\(privateKeyPath) is corrupt: \(error.message)", underlying: error)
        }
        if let stored = try? loadPublicKey(), stored != key.publicKey {
            throw KeyAuthError(.keyCorrupt, "\(privateKeyPath) does not match \(publicKeyPath)")
        }
        return key
    }

    /// Writes `key` encrypted with ``PINKeyEncryption/standard`` over the file that held `old`.
    ///
    /// Under the store's lock, and only if the file still holds `old`: another process may have
    /// re-encrypted it meanwhile, or a reset and a new registration may have replaced the key.
    private func reencrypt(_ key: RSAPrivateKey, pin: SecretBytes, replacing old: [UInt8]) throws(KeyAuthError) {
        var fresh = try key.pkcs8PEM(pin: pin, encryption: .standard)
        defer { CryptoPrimitives.wipe(&fresh) }
        // Never replace a key that opens with one that might not: losing it means registering again.
        guard try RSAPrivateKey(pemRepresentation: fresh, pin: pin).publicKey == key.publicKey else {
            throw KeyAuthError(.cryptoFailed, "the re-encrypted key does not decrypt to the same key")
        }
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            var current = try SecureFile.readProtected(privateKeyPath)
            defer { CryptoPrimitives.wipe(&current) }
            guard current == old else { return }
            try SecureFile.write(fresh, to: privateKeyPath)
        }
    }

    /// Loads the public key without needing the PIN.
    ///
    /// - Throws: `.keyNotFound`, `.keyUnprotected`, `.keyCorrupt`.
    public func loadPublicKey() throws(KeyAuthError) -> RSAPublicKey {
        let pem = try SecureFile.readProtected(publicKeyPath)
        do {
            return try RSAPublicKey(pemRepresentation: pem)
        } catch {
            throw KeyAuthError(.keyCorrupt, "\(publicKeyPath) is corrupt: \(error.message)", underlying: error)
        }
    }

    /// Deletes the key pair and everything stored beside it for this key.
    ///
    /// The PIN attempt counter goes with the key, so a new key starts with a clean count.
    ///
    /// - Parameter extraFiles: other files in the directory that belong to the key (account
    ///   metadata).
    public func reset(alsoRemoving extraFiles: [String] = []) throws(KeyAuthError) {
        guard SecureFile.exists(directory) else { return }
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            try SecureFile.remove(privateKeyPath)
            try SecureFile.remove(publicKeyPath)
            for file in Self.keyMetadataFiles + extraFiles { try SecureFile.remove(directory + "/" + file) }
        }
    }
}
