/// Proves that a person is at the machine before the device key is used.
///
/// On macOS the original keyauth asked Touch ID; on Linux there is no such sensor everywhere, so the
/// check is pluggable: a PIN that also decrypts the key (``PINPresence``), the system's own
/// authentication stack (``PAMPresence``), or an explicit opt-out for headless machines
/// (``NoPresence``). The flow depends only on this protocol, so tests and embedding apps can
/// supply their own.
public protocol PresenceCheck: Sendable {
    /// Which kind of check this is, so that the key store can record how a key is protected.
    var kind: PresenceKind { get }

    /// Whether the check can run here at all (a terminal exists, a PAM service is configured).
    ///
    /// The analog of Touch ID's `isTouchIDAuthenticationAvailable`: callers use it to choose a
    /// check or to explain why none is usable, before they prompt anyone.
    func isAvailable() -> Bool

    /// Asks the user to prove presence and returns only when they did.
    ///
    /// - Parameter reason: Why the key is needed, shown to the user ("Sign in to example.com").
    /// - Throws: ``KeyAuthError`` with ``KeyAuthError/Code-swift.struct/presenceDenied`` when the
    ///   user failed, ``KeyAuthError/Code-swift.struct/presenceUnavailable`` when the check cannot
    ///   run, ``KeyAuthError/Code-swift.struct/lockedOut`` after too many failures, or
    ///   ``KeyAuthError/Code-swift.struct/cancelled``.
    func verifyPresence(reason: String) async throws(KeyAuthError)

    /// Proves presence and opens the device key with what the check yields, for a key that is
    /// protected by the check itself (a PIN that decrypts the key file, a TPM key's
    /// authorization).
    ///
    /// A check that has no secret of its own proves presence and calls `open` with nil (the
    /// default); ``PINPresence`` asks for the PIN and counts wrong ones across processes.
    /// - Parameters:
    ///   - reason: Why the key is needed, shown to the user.
    ///   - open: Opens the key with the secret; throws `.wrongPIN` when the secret does not open
    ///     it. The secret must not escape it.
    /// - Throws: what ``verifyPresence(reason:)`` throws, `.wrongPIN` (with `retryAfter` when a
    ///   delay starts), `.lockedOut`, and `open`'s other errors.
    func unlock<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key) async throws(KeyAuthError)
        -> Key

    /// Proves presence and opens a key whose hardware checks the secret and counts wrong ones
    /// itself (a TPM key, whose PIN is its authorization value).
    ///
    /// Like ``unlock(reason:_:)``, but the check keeps no count of its own: the hardware's count
    /// cannot be reset by deleting a file, and a second count beside it would only disagree with
    /// it. `open` usually cannot tell a wrong secret yet (the TPM sees it when the key signs);
    /// the default proves presence and calls `open` with nil, and ``PINPresence`` asks for the
    /// PIN without its attempts file.
    /// - Parameters:
    ///   - reason: Why the key is needed, shown to the user.
    ///   - open: Opens the key with the secret. The secret must not escape it, except inside the
    ///     key it returns, which needs it for every signature.
    /// - Throws: what ``verifyPresence(reason:)`` throws, and `open`'s errors.
    func unlockHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key

    /// Proves presence before a new device key is made, and returns the secret that will protect
    /// it, or nil when the check protects nothing (the default).
    ///
    /// - Parameters:
    ///   - reason: Why a key is being made, shown to the user.
    ///   - minimumLength: The shortest secret the key store accepts, in characters: a key file
    ///     that can be copied and guessed offline needs a longer one than a key in hardware that
    ///     counts wrong guesses itself.
    ///   - confirm: Whether to ask twice and compare, where the check asks at all.
    /// - Throws: what ``verifyPresence(reason:)`` throws; `.invalidArgument` for a secret that is
    ///   too short or entered differently twice.
    func secretForNewKey(reason: String, minimumLength: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes?

    /// ``secretForNewKey(reason:minimumLength:confirm:)`` for a key store that also has a longest
    /// secret (a TPM key's PIN is at most 32 bytes), so that a check that asks a person can ask
    /// again for a secret that is too long, as it does for one that is too short, instead of the
    /// key store refusing it after the person confirmed it.
    ///
    /// The default ignores `maximumBytes` and asks ``secretForNewKey(reason:minimumLength:confirm:)``;
    /// the key store then refuses a secret that is too long.
    func secretForNewKey(reason: String, minimumLength: Int, maximumBytes: Int, confirm: Bool)
        async throws(KeyAuthError) -> SecretBytes?

    /// Whether the flow should open a hardware key again, asking for its secret again, after
    /// the hardware refused the secret at a signature: `error` (`.wrongPIN`) is the `refusals`th
    /// refusal of this run.
    ///
    /// A TPM sees a wrong PIN only when the key signs, after ``unlockHardwareKey(reason:_:)``
    /// returned, so the check cannot ask again by itself as it does for a key file. The default
    /// says no; ``PINPresence`` shows the refusal and says yes while it would ask again for a key
    /// file's PIN.
    func asksAgain(afterHardwareRefusal error: KeyAuthError, refusals: Int) -> Bool
}

extension PresenceCheck {
    /// A check without a secret has nothing to ask again.
    public func asksAgain(afterHardwareRefusal error: KeyAuthError, refusals: Int) -> Bool { false }

    /// Proves presence, then opens the key without a secret.
    public func unlock<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        try await verifyPresence(reason: reason)
        return try open(nil)
    }

    /// What ``unlock(reason:_:)`` does: a check without a count of its own has nothing to skip.
    public func unlockHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        try await unlock(reason: reason, open)
    }

    /// Opens the device key in `store` after this check, as every login does: a TPM key through
    /// ``unlockHardwareKey(reason:_:)``, since the TPM counts wrong PINs itself, a key file through
    /// ``unlock(reason:_:)``, with the check's own count.
    package func unlockDeviceKey(in store: KeyPairStore, reason: String) async throws(KeyAuthError) -> DeviceKey {
        let open = { (secret: SecretBytes?) throws(KeyAuthError) -> DeviceKey in try store.loadKey(pin: secret) }
        if store.storedKind == .tpm { return try await unlockHardwareKey(reason: reason, open) }
        return try await unlock(reason: reason, open)
    }

    /// ``unlockDeviceKey(in:reason:)`` once more, after the hardware refused the key's secret
    /// at a signature (`refusal`) and ``asksAgain(afterHardwareRefusal:refusals:)`` said yes:
    /// input that ends at the new prompt leaves the refusal as the outcome, as a key file's
    /// re-asking does.
    package func unlockDeviceKey(
        in store: KeyPairStore, reason: String, after refusal: KeyAuthError
    ) async throws(KeyAuthError) -> DeviceKey {
        do {
            return try await unlockDeviceKey(in: store, reason: reason)
        } catch {
            throw error.code == .cancelled ? refusal : error
        }
    }

    /// Asks ``secretForNewKey(reason:minimumLength:confirm:)``: a check that does not ask a person
    /// for the secret has no one to ask again.
    public func secretForNewKey(reason: String, minimumLength: Int, maximumBytes: Int, confirm: Bool)
        async throws(KeyAuthError) -> SecretBytes?
    {
        try await secretForNewKey(reason: reason, minimumLength: minimumLength, confirm: confirm)
    }

    /// Proves presence; the new key is protected by nothing of this check's.
    public func secretForNewKey(reason: String, minimumLength: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes?
    {
        try await verifyPresence(reason: reason)
        return nil
    }
}

/// The kinds of presence check, stored next to a key so that later runs use the same one.
public enum PresenceKind: String, Sendable, Codable {
    /// A PIN that also encrypts the private key at rest.
    case pin
    /// The system's PAM stack (a password, a fingerprint reader, a hardware token).
    case pam
    /// No check at all; only for machines without a person in front of them.
    case none
}
