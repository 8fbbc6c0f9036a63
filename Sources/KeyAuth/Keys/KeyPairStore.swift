/// Keeps one device key pair on disk: created once, loaded on every login, removed on reset.
///
/// A key is one of two kinds, and the store sees from its files which (``storedKind``):
/// - a **key file**: PKCS#8 PEM, encrypted with the PIN when there is one
///   (``PINKeyEncryption/standard``: scrypt), `device-key.pem`;
/// - a **TPM key**: the `TSS2 PRIVATE KEY` blob that the TPM wrapped its private key in,
///   `device-key.tpm`, useless on any other TPM. The PIN is the key's authorization value,
///   checked by the TPM when it signs, not by anything on disk.
///
/// Where new keys go is the app's choice (``KeyStore``). The public key sits beside either kind
/// (`device-key.pub`), so that `pubkey` and `status` need no PIN and no TPM. Files are 0600 in a
/// 0700 directory. Writes are atomic and serialised by an exclusive lock, so two processes
/// registering at once never leave two keys, and a process killed mid-write leaves the previous
/// state intact.
///
/// ```swift
/// let store = KeyPairStore(directory: keyDirectory, keyStore: .automatic(try TPMConnection.fromEnvironment()))
/// let created = try store.createKey(pin: pin)      // in the TPM when one answers, else a file
/// let key = try store.loadKey(pin: pin)            // either kind, no hint needed
/// let signature = try key.signature(for: message)  // made by the TPM for a TPM key
/// try store.reset()                                // deletes the files; nothing stays in the TPM
/// ```
public struct KeyPairStore: Sendable {
    /// The directory that holds the key files.
    public let directory: String
    /// Where new keys are made, and the TPM that opens TPM keys.
    public let keyStore: KeyStore

    /// The shortest PIN a new key file accepts, in characters.
    ///
    /// A copied key file can be guessed offline, beyond the reach of the attempt counter: at
    /// about a third of a second per guess on one core, the 10^4 four-digit PINs fall in under
    /// an hour, the 10^6 six-digit ones take months of core time.
    public static let minimumPINLength = 6

    /// The shortest PIN a new TPM key accepts, in characters: the TPM locks out after as many
    /// wrong ones as its owner allows (``TPMInfo/maximumTries``; 3 on swtpm), and a copy of the
    /// blob is useless for guessing anywhere else.
    public static let minimumTPMPINLength = 4

    /// - Parameters:
    ///   - directory: created with mode 0700 on first write.
    ///   - keyStore: where ``createKey(bits:pin:)`` makes keys; files by default. A TPM key
    ///     already stored is opened on this choice's TPM, or on the kernel resource manager
    ///     (``TPMConnection/kernelResourceManager``) under `.file`.
    public init(directory: String, keyStore: KeyStore = .file) {
        self.directory = directory
        self.keyStore = keyStore
    }

    /// The store an app keeps its device key in by default: `$XDG_DATA_HOME/<appName>/key`, or
    /// `$HOME/.local/share/<appName>/key` when `XDG_DATA_HOME` is unset or relative (as the XDG
    /// specification requires).
    ///
    /// - Parameters:
    ///   - appName: the app's directory name: letters, digits, `.`, `_` and `-`, not starting
    ///     with a dot, so that it stays one directory under the data home.
    ///   - environment: the process environment (`ProcessInfo.processInfo.environment`).
    ///   - keyStore: where new keys are made; files by default.
    /// - Throws: `.invalidArgument` for another app name; `.storageFailed` when neither
    ///   `XDG_DATA_HOME` nor `HOME` gives a directory.
    public static func `default`(
        appName: String, environment: [String: String], keyStore: KeyStore = .file
    ) throws(KeyAuthError) -> KeyPairStore {
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
        return KeyPairStore(directory: dataHome + "/" + appName + "/key", keyStore: keyStore)
    }

    /// The key file of a file key.
    public var privateKeyPath: String { directory + "/device-key.pem" }
    /// The `TSS2 PRIVATE KEY` blob of a TPM key.
    public var tpmKeyPath: String { directory + "/device-key.tpm" }
    /// The public key file (SPKI PEM).
    public var publicKeyPath: String { directory + "/device-key.pub" }
    private var lockPath: String { directory + "/.lock" }
    /// Where ``PINPresence`` counts wrong PINs for a key file (its lock file sits beside it); a
    /// TPM counts wrong PINs for its keys itself.
    public var pinAttemptsPath: String { directory + "/pin-attempts" }
    /// Files beside the key that belong to it and go when it goes.
    static let keyMetadataFiles = ["pin-attempts", "pin-attempts.lock"]

    /// Whether a private key file or a TPM key blob exists (it may still be unreadable or corrupt).
    public var hasKey: Bool { storedKind != nil }

    /// The kind of the stored key, from its file name; nil when there is none.
    public var storedKind: KeyStore.Kind? {
        if SecureFile.exists(tpmKeyPath) { return .tpm }
        if SecureFile.exists(privateKeyPath) { return .file }
        return nil
    }

    /// This store with ``KeyStore/automatic(_:)`` decided for the moment: `.tpm` when its TPM
    /// answers now and can make keys (``TPMInfo/canCreateKeys``), `.file` otherwise. Other
    /// choices are returned unchanged.
    ///
    /// Decide once per new key, before asking for its PIN: the PIN's rules depend on the kind
    /// (``KeyStore/Kind/minimumPINLength``).
    public func resolvingAutomatic() -> KeyPairStore {
        guard case .automatic(let tpm) = keyStore else { return self }
        let usable = (try? tpm.infoForNewKeys()) != nil
        return KeyPairStore(directory: directory, keyStore: usable ? .tpm(tpm) : .file)
    }

    /// The kind a new key gets; for `.automatic` this asks the TPM whether it answers.
    public var newKeyKind: KeyStore.Kind {
        if case .tpm = resolvingAutomatic().keyStore { return .tpm }
        return .file
    }

    /// Generates and stores a new key pair, where ``keyStore`` says.
    ///
    /// Generation happens outside the lock (it takes a second for 3072 bits, longer in a hardware
    /// TPM); the check that no key exists and the write happen under it. A TPM key is stored as
    /// its blob only: the private key never leaves the TPM.
    ///
    /// - Parameters:
    ///   - bits: 2048, 3072 or 4096. By default 3072 for a key file, and for a TPM key 3072 where
    ///     the TPM supports it, else 2048 (``TPMInfo/preferredRSAKeySize``).
    ///   - pin: a key file is stored encrypted with it; a TPM key gets it as its authorization
    ///     value (at most ``TPMKey/maximumPINBytes`` bytes). The caller keeps and wipes it; the
    ///     returned key holds on to it for a TPM key, which needs it for every signature.
    /// - Throws: `.keyExists` when another key is already stored (perhaps by a concurrent
    ///   process), `.storageFailed` when the files cannot be written, `.invalidArgument` for a
    ///   size the TPM does not support or a PIN too long for it, `.tpmUnavailable` when the
    ///   chosen TPM does not answer.
    @discardableResult
    public func createKey(bits: Int? = nil, pin: SecretBytes? = nil) throws(KeyAuthError) -> DeviceKey {
        switch keyStore {
        case .file:
            let key = try RSAPrivateKey.generate(bits: bits ?? 3072)
            try store(key, pin: pin)
            return DeviceKey(key)
        case .tpm(let tpm):
            return DeviceKey(try createTPMKey(bits: bits, pin: pin, on: tpm))
        case .automatic:
            return try resolvingAutomatic().createKey(bits: bits, pin: pin)
        }
    }

    /// Has `tpm` generate a key and stores its blob.
    private func createTPMKey(bits: Int?, pin: SecretBytes?, on tpm: TPMConnection) throws(KeyAuthError)
        -> TPMSigningKey
    {
        if let pin { try TPMKey.checkLength(of: pin) }
        // Read before the key is made: a software TPM serves one connection at a time.
        let info = try tpm.infoForNewKeys()
        let size = bits ?? info.preferredRSAKeySize
        guard info.rsaKeySizes.contains(size) else {
            let sizes = info.rsaKeySizes.map(String.init).joined(separator: " or ")
            throw KeyAuthError(
                .invalidArgument,
                "the TPM at \(tpm.tcti) (\(info.manufacturer)) makes RSA keys of \(sizes) bits, not \(size)")
        }
        let key = try TPMKey.generate(bits: size, pin: pin, on: tpm)
        guard key.isBoundToTPM else {
            throw KeyAuthError(.cryptoFailed, "the TPM at \(tpm.tcti) made a key that it would let leave it")
        }
        try store(key)
        return TPMSigningKey(key: key, pin: pin, on: tpm)
    }

    /// Stores an existing key pair (generated elsewhere, or imported) as a key file.
    ///
    /// - Throws: `.keyExists` when a key is already stored.
    public func store(_ key: RSAPrivateKey, pin: SecretBytes? = nil) throws(KeyAuthError) {
        var privatePEM = try key.pkcs8PEM(pin: pin)
        defer { CryptoPrimitives.wipe(&privatePEM) }
        try storeNew(publicKey: key.publicKey, privatePart: privatePEM, at: privateKeyPath)
    }

    /// Stores a TPM key's blob (one made by ``TPMKey/generate(bits:pin:on:)``).
    ///
    /// - Throws: `.keyExists` when a key is already stored.
    public func store(_ key: TPMKey) throws(KeyAuthError) {
        try storeNew(publicKey: key.publicKey, privatePart: key.pemRepresentation, at: tpmKeyPath)
    }

    /// Writes a new key's two files under the lock, unless a key of either kind exists.
    private func storeNew(publicKey: RSAPublicKey, privatePart: [UInt8], at path: String) throws(KeyAuthError) {
        try SecureFile.createDirectory(directory)
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            guard !hasKey else {
                throw KeyAuthError(.keyExists, "a device key already exists in \(directory)")
            }
            // Public first: the private file's existence is what marks a key as present.
            try SecureFile.write(Array(publicKey.pemRepresentation.utf8), to: publicKeyPath)
            try SecureFile.write(privatePart, to: path)
        }
    }

    /// Whether the stored key file is encrypted with a PIN (key files only).
    public func isEncrypted() throws(KeyAuthError) -> Bool {
        var pem = try SecureFile.readProtected(privateKeyPath)
        defer { CryptoPrimitives.wipe(&pem) }
        return RSAPrivateKey.isEncryptedPEM(pem)
    }

    /// Opens the stored key, of either kind, for signing.
    ///
    /// A key file is read and decrypted with `pin` here, so a wrong PIN fails here. A TPM key's
    /// blob is read and checked here, but the TPM checks `pin` only when the key signs: a wrong
    /// PIN fails at ``DeviceKey/signature(for:)``, and counts toward the TPM's lockout there.
    ///
    /// - Throws: what ``loadPrivateKey(pin:)`` and ``loadTPMKey(pin:)`` throw.
    public func loadKey(pin: SecretBytes? = nil) throws(KeyAuthError) -> DeviceKey {
        guard storedKind == .tpm else { return DeviceKey(try loadPrivateKey(pin: pin)) }
        return DeviceKey(try loadTPMKey(pin: pin))
    }

    /// Reads the TPM key's blob, for signing with `pin` on ``keyStore``'s TPM.
    ///
    /// - Throws: `.keyNotFound`, `.keyUnprotected` (file mode, owner, symlink), `.keyCorrupt`
    ///   (not a TPM key blob, or not matching the stored public key). Nothing here asks the TPM.
    public func loadTPMKey(pin: SecretBytes? = nil) throws(KeyAuthError) -> TPMSigningKey {
        let blob = try SecureFile.readProtected(tpmKeyPath)
        let key: TPMKey
        do {
            key = try TPMKey(pemRepresentation: blob)
        } catch {
            throw KeyAuthError(.keyCorrupt, "\(tpmKeyPath) is corrupt: \(error.message)", underlying: error)
        }
        if let stored = try? loadPublicKey(), stored != key.publicKey {
            throw KeyAuthError(.keyCorrupt, "\(tpmKeyPath) does not match \(publicKeyPath)")
        }
        return TPMSigningKey(key: key, pin: pin, on: keyStore.tpmConnection ?? .kernelResourceManager)
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
    ///   (truncated or not a key, or not matching the stored public key), `.wrongPIN`;
    ///   `.invalidArgument` when the stored key is a TPM key, whose private half no file holds.
    public func loadPrivateKey(pin: SecretBytes? = nil) throws(KeyAuthError) -> RSAPrivateKey {
        guard storedKind != .tpm else {
            throw KeyAuthError(
                .invalidArgument, "the device key in \(directory) is held by a TPM: open it with loadKey")
        }
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
        _ = try writeEncrypted(key, pin: pin) { current in current == old }
    }

    /// Protects the stored key, of either kind, with a new PIN in place of the current one
    /// (`keyauth pin change`), without registering again: the public key, and so the key ID the
    /// server knows, stays the same.
    ///
    /// A PIN means something different for each kind, so each is changed where it is checked:
    /// a key file is encrypted again under the new PIN (``replacePIN(of:with:)-(RSAPrivateKey,_)``),
    /// a TPM key gets a new authorization value from the TPM
    /// (``replacePIN(of:with:)-(TPMSigningKey,_)``).
    ///
    /// - Parameters:
    ///   - key: the stored key, as ``loadKey(pin:)`` opened it with the current PIN.
    ///   - pin: the new PIN; its length is the caller's check (``KeyStore/Kind/minimumPINLength``).
    /// - Throws: `.invalidArgument` for a key that neither a key file nor a TPM blob of this store
    ///   holds (the agent's); what the two kinds' variants throw.
    public func replacePIN(of key: DeviceKey, with pin: SecretBytes) throws(KeyAuthError) {
        if let file = key.signer as? RSAPrivateKey {
            try replacePIN(of: file, with: pin)
        } else if let tpm = key.signer as? TPMSigningKey {
            try replacePIN(of: tpm, with: pin)
        } else {
            throw KeyAuthError(
                .invalidArgument, "the device key in \(directory) is not open here: its PIN cannot change")
        }
    }

    /// Encrypts the key file's key under a new PIN, in place of the current one.
    ///
    /// The caller opens the key with the current PIN first (through ``PINPresence``, so that
    /// wrong PINs count). The new file is written atomically and checked by decrypting it before
    /// it replaces the old one: a crash leaves one of the two files, each opening with its PIN.
    /// - Parameters:
    ///   - key: the stored key, opened with the current PIN.
    ///   - pin: the new PIN; at least ``minimumPINLength`` characters is the caller's check.
    /// - Throws: `.invalidArgument` when the store holds a TPM key
    ///   (``replacePIN(of:with:)-(TPMSigningKey,_)`` changes that); `.keyNotFound`; `.keyCorrupt`
    ///   when the stored key is no longer `key` (a reset and a new registration meanwhile);
    ///   `.storageFailed`.
    public func replacePIN(of key: RSAPrivateKey, with pin: SecretBytes) throws(KeyAuthError) {
        guard storedKind != .tpm else {
            throw KeyAuthError(.invalidArgument, "the device key in \(directory) is held by a TPM")
        }
        let written = try writeEncrypted(key, pin: pin) { (_) throws(KeyAuthError) in
            try loadPublicKey() == key.publicKey
        }
        guard written else {
            throw KeyAuthError(.keyCorrupt, "the device key in \(directory) changed while its PIN was being changed")
        }
    }

    /// Gives the stored TPM key a new authorization value, in place of the PIN `key` holds.
    ///
    /// No file can be re-encrypted here: the TPM checks a TPM key's PIN, so the TPM itself
    /// re-wraps the private key under the new one (``TPMKey/changingPIN(from:to:on:)``,
    /// `TPM2_ObjectChangeAuth`) and the new blob replaces the old one. The current PIN is checked
    /// by the TPM as it authorizes that change: a wrong one fails as at a login (`.wrongPIN`,
    /// counted once toward the TPM's lockout) and writes nothing. The new blob has signed with
    /// the new PIN before it is written, atomically (0600, `fsync`, `rename`, `fsync` of the
    /// directory), and only while the file still holds the blob `key` was read from: a process
    /// killed at any point leaves the old blob or the new one, each opening with its own PIN. The
    /// public key file does not change.
    ///
    /// - Parameters:
    ///   - key: the stored key, from ``loadTPMKey(pin:)`` with the current PIN, on the TPM that
    ///     made it. Callers that ask a person check the PIN first (``TPMSigningKey/checkPIN()``
    ///     through ``PINPresence``), so that a typo is asked again before the new PIN is.
    ///   - pin: the new PIN, 1 to ``TPMKey/maximumPINBytes`` bytes; at least
    ///     ``minimumTPMPINLength`` characters is the caller's check.
    /// - Throws: `.invalidArgument` when the store holds a key file, for a key made without a PIN,
    ///   or for a new PIN outside the limits; `.wrongPIN`, `.lockedOut`, `.tpmUnavailable`;
    ///   `.keyCorrupt` when the stored blob is no longer `key`'s (another PIN change, or a reset
    ///   and a new registration, meanwhile); `.storageFailed`.
    /// - Warning: a copy of the old blob still opens with the old PIN (see
    ///   ``TPMKey/changingPIN(from:to:on:)``).
    public func replacePIN(of key: TPMSigningKey, with pin: SecretBytes) throws(KeyAuthError) {
        guard storedKind == .tpm else {
            throw KeyAuthError(.invalidArgument, "the device key in \(directory) is a key file, not a TPM key")
        }
        let changed = try key.changingPIN(to: pin)
        let written = try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) -> Bool in
            guard try SecureFile.readProtected(tpmKeyPath) == key.key.pemRepresentation else { return false }
            try SecureFile.write(changed.pemRepresentation, to: tpmKeyPath)
            return true
        }
        guard written else {
            throw KeyAuthError(.keyCorrupt, "the device key in \(directory) changed while its PIN was being changed")
        }
    }

    /// Writes `key` encrypted under `pin` with ``PINKeyEncryption/standard`` over the key file,
    /// under the store's lock and only when `isStillCurrent` accepts the file's present bytes.
    ///
    /// - Returns: whether the file was written.
    private func writeEncrypted(
        _ key: RSAPrivateKey, pin: SecretBytes, when isStillCurrent: ([UInt8]) throws(KeyAuthError) -> Bool
    ) throws(KeyAuthError) -> Bool {
        var fresh = try key.pkcs8PEM(pin: pin, encryption: .standard)
        defer { CryptoPrimitives.wipe(&fresh) }
        // Never replace a key that opens with one that might not: losing it means registering again.
        guard try RSAPrivateKey(pemRepresentation: fresh, pin: pin).publicKey == key.publicKey else {
            throw KeyAuthError(.cryptoFailed, "the re-encrypted key does not decrypt to the same key")
        }
        return try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) -> Bool in
            var current = try SecureFile.readProtected(privateKeyPath)
            defer { CryptoPrimitives.wipe(&current) }
            guard try isStillCurrent(current) else { return false }
            try SecureFile.write(fresh, to: privateKeyPath)
            return true
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
    /// The PIN attempt counter goes with the key, so a new key starts with a clean count. A TPM
    /// key goes with its blob: the TPM holds keys only while they sign, so nothing of it remains
    /// there, and the TPM need not answer for a reset.
    ///
    /// - Parameter extraFiles: other files in the directory that belong to the key (account
    ///   metadata).
    public func reset(alsoRemoving extraFiles: [String] = []) throws(KeyAuthError) {
        guard SecureFile.exists(directory) else { return }
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            try SecureFile.remove(privateKeyPath)
            try SecureFile.remove(tpmKeyPath)
            try SecureFile.remove(publicKeyPath)
            for file in Self.keyMetadataFiles + extraFiles { try SecureFile.remove(directory + "/" + file) }
        }
    }
}
