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
    /// The lock file that serialises writes to the key files, across processes.
    var lockPath: String { directory + "/.lock" }
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

    /// Writes a new key's two files under the lock, unless a key of either kind exists.
    func storeNew(publicKey: RSAPublicKey, privatePart: [UInt8], at path: String) throws(KeyAuthError) {
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
