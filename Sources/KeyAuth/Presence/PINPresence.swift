import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Proves presence with a PIN that also decrypts the private key at rest.
///
/// A PIN that is only compared with a stored value proves nothing against someone who can read
/// the key file; here the PIN is the key's passphrase, so the real check is the decryption the
/// key store runs inside ``withPIN(reason:_:)``. Wrong PINs are counted in a small file next to
/// the key, so that the delay after five failures holds across processes: running `keyauth`
/// again does not reset it.
///
/// For a TPM key the PIN is the key's authorization value instead, and the TPM checks and counts
/// it (``unlockHardwareKey(reason:_:)``); the attempts file is not used for such a key.
/// - Warning: the counter slows down guessing through this API only. Someone who can copy the key
///   file can guess offline; the scrypt cost of the key encryption and the PIN's length are what
///   protect it there.
public struct PINPresence: PresenceCheck {
    /// Consecutive wrong PINs allowed before a delay applies.
    public static let freeAttempts = 5
    /// The delay after the first failure beyond ``freeAttempts``; it doubles with each further one.
    public static let baseDelay = 30
    /// The longest delay, so that a forgotten PIN does not lock the person out for days.
    public static let maximumDelay = 3600

    /// A PIN, for the key store that records how a key is protected.
    public var kind: PresenceKind { .pin }

    /// Who asks for the PIN (the terminal, standard input, a test queue).
    public let reader: any SecretReader

    /// The file that counts wrong PINs, normally `<keydir>/pin-attempts`.
    public let attemptsFile: String

    /// The clock that times the delays.
    public let clock: KeyAuthClock

    /// How many times one ``unlock(reason:_:)`` asks before it gives up with the wrong-PIN
    /// error, and how many times ``newPIN(minimumLength:maximumBytes:confirm:)`` asks again after a PIN that
    /// is too short or a confirmation that differs.
    ///
    /// A typo should not cost a whole command; three tries is what `sudo` gives. Each wrong PIN
    /// still counts towards the delay. Set it to 1 for a reader that is not a person (standard
    /// input), where asking again would only read the next line.
    public var attemptsPerRun = 3

    /// Creates a PIN check.
    ///
    /// - Parameters:
    ///   - reader: Asks for the PIN; it is run on a thread of its own, as it blocks.
    ///   - attemptsFile: Where wrong PINs are counted; created with mode 0600 when first needed.
    ///     A lock file with `.lock` appended sits next to it.
    ///   - clock: The time source; tests pass their own so that they need not sleep through a
    ///     delay.
    public init(reader: any SecretReader, attemptsFile: String, clock: KeyAuthClock = .system) {
        self.reader = reader
        self.attemptsFile = attemptsFile
        self.clock = clock
    }

    /// Whether the reader can ask anybody.
    public func isAvailable() -> Bool {
        reader.isAvailable()
    }

    /// Reads a non-empty PIN without checking it.
    ///
    /// Only decryption can tell a right PIN from a wrong one, so a caller that uses the key should
    /// call ``withPIN(reason:_:)`` instead; this exists for the protocol and for flows that only
    /// need a person to answer. A lockout still applies.
    /// - Throws: ``KeyAuthError/Code-swift.struct/lockedOut`` before asking when locked out,
    ///   ``KeyAuthError/Code-swift.struct/presenceDenied`` for an empty PIN, or the reader's error.
    public func verifyPresence(reason: String) async throws(KeyAuthError) {
        try PINAttemptCounter(attemptsFile: attemptsFile, clock: clock).checkLockout()
        _ = try await readPIN(reason: reason)
    }

    /// Asks for the PIN and opens the key with it: ``withPIN(reason:_:)``, so that wrong PINs
    /// count towards the delay.
    ///
    /// Asks up to ``attemptsPerRun`` times, showing the wrong-PIN message between tries, and
    /// stops at once when a delay starts or input ends.
    public func unlock<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        try await askingAgainAfterWrongPINs { () async throws(KeyAuthError) in
            try await withPIN(reason: reason) { (pin) throws(KeyAuthError) in try open(pin) }
        }
    }

    /// Asks for the PIN of a key whose hardware checks it, with `open` having the hardware check
    /// it at once: up to ``attemptsPerRun`` times, as ``unlock(reason:_:)`` asks for a key file.
    ///
    /// For `keyauth pin change` on a TPM key, which checks the current PIN (one TPM signature,
    /// ``TPMSigningKey/checkPIN()``) before it asks for the new one. As with
    /// ``unlockHardwareKey(reason:_:)`` no attempts file is used: each wrong PIN costs one count
    /// toward the TPM's own lockout, what a login with that PIN costs. Asking stops when the TPM
    /// locks with a wait (its error carries ``KeyAuthError/retryAfter``) or refuses for another
    /// reason; a TPM locked until its owner resets it refuses a further try without counting it.
    /// - Parameters:
    ///   - reason: Why the key is needed, shown above the prompt.
    ///   - open: Opens the key and has the hardware check the PIN; throws
    ///     ``KeyAuthError/Code-swift.struct/wrongPIN`` when it is wrong.
    /// - Throws: the last wrong-PIN error, ``KeyAuthError/Code-swift.struct/presenceDenied`` for
    ///   an empty PIN, the reader's and `open`'s other errors.
    public func unlockCheckedHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        try await askingAgainAfterWrongPINs { () async throws(KeyAuthError) in
            try await unlockHardwareKey(reason: reason, open)
        }
    }

    /// Yes after a wrong PIN the TPM refused without starting a wait, up to ``attemptsPerRun``
    /// PINs in all, having shown the refusal (`wrong PIN; the TPM locks out after N more wrong
    /// PINs`): a login on a terminal asks again, as for a key file. `--pin-stdin`'s single
    /// attempt, a lockout and any other error say no.
    public func asksAgain(afterHardwareRefusal error: KeyAuthError, refusals: Int) -> Bool {
        guard error.code == .wrongPIN, error.retryAfter == nil, refusals < attemptsPerRun else { return false }
        reader.display(error.message, isError: true)
        return true
    }

    /// Runs `attempt` up to ``attemptsPerRun`` times while it fails with a wrong PIN that starts
    /// no wait, showing each wrong-PIN message before the next try.
    private func askingAgainAfterWrongPINs<Key>(
        _ attempt: () async throws(KeyAuthError) -> Key
    ) async throws(KeyAuthError) -> Key {
        var tries = 1
        var previous: KeyAuthError?
        while true {
            do {
                return try await attempt()
            } catch {
                // Input that ends at a second prompt leaves the wrong PIN as the outcome.
                if error.code == .cancelled, let previous { throw previous }
                guard asksAgain(afterHardwareRefusal: error, refusals: tries) else { throw error }
                previous = error
                tries += 1
            }
        }
    }

    /// Asks for the PIN of a key whose hardware checks it (a TPM key) and lends it to `open`.
    ///
    /// The attempts file is neither read nor written: the TPM counts wrong PINs, and its lockout
    /// cannot be lifted by deleting a file.
    /// - Throws: ``KeyAuthError/Code-swift.struct/presenceDenied`` for an empty PIN, the reader's
    ///   and `open`'s errors.
    public func unlockHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        try await open(readPIN(reason: reason))
    }

    /// Asks for the new key's PIN: ``newPIN(minimumLength:maximumBytes:confirm:)``.
    public func secretForNewKey(reason: String, minimumLength: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes?
    {
        try await newPIN(minimumLength: minimumLength, confirm: confirm)
    }

    /// Asks for the new key's PIN, again while it is longer than `maximumBytes` as while it is
    /// too short: ``newPIN(minimumLength:maximumBytes:confirm:)``.
    public func secretForNewKey(reason: String, minimumLength: Int, maximumBytes: Int, confirm: Bool)
        async throws(KeyAuthError) -> SecretBytes?
    {
        try await newPIN(minimumLength: minimumLength, maximumBytes: maximumBytes, confirm: confirm)
    }

    /// Asks for the PIN and lends it to `body`, which decrypts the key with it.
    ///
    /// The attempt is counted as a failure before `body` runs, so that a process killed during a
    /// guess, or several processes guessing at once, cannot escape the count; a success resets it
    /// and an error other than a wrong PIN takes the attempt back. A right PIN whose reset cannot
    /// be written still succeeds, with a warning through ``SecretReader/display(_:isError:)``.
    /// - Parameters:
    ///   - reason: Why the key is needed, shown above the prompt.
    ///   - body: Uses the PIN; throws ``KeyAuthError/Code-swift.struct/wrongPIN`` when it does not
    ///     decrypt the key. The PIN must not escape it.
    /// - Throws: ``KeyAuthError/Code-swift.struct/lockedOut`` with `retryAfter` before asking when
    ///   too many wrong PINs were entered recently; ``KeyAuthError/Code-swift.struct/wrongPIN``
    ///   (with `retryAfter` when this failure starts a delay);
    ///   ``KeyAuthError/Code-swift.struct/presenceDenied`` for an empty PIN;
    ///   ``KeyAuthError/Code-swift.struct/storageFailed`` when the attempts file cannot be used;
    ///   the reader's and `body`'s other errors.
    public func withPIN<Value>(
        reason: String,
        _ body: (SecretBytes) throws(KeyAuthError) -> Value
    ) async throws(KeyAuthError) -> Value {
        let counter = PINAttemptCounter(attemptsFile: attemptsFile, clock: clock)
        try counter.checkLockout()
        let pin = try await readPIN(reason: reason)
        return try counter.counting(warning: { reader.display($0, isError: true) }) { () throws(KeyAuthError) in
            try body(pin)
        }
    }

    /// Asks for a new PIN at registration, twice when `confirm` is true.
    ///
    /// The shortest acceptable PIN depends on what guards the key, so the key store says it:
    /// a key file can be copied and guessed offline, where only the key derivation's cost per
    /// guess and the PIN's length hold the attacker back (``KeyPairStore/minimumPINLength``, 6);
    /// a key in hardware that counts wrong guesses itself can do with fewer.
    /// - Parameters:
    ///   - minimumLength: The shortest PIN accepted, counted in Unicode scalars.
    ///   - maximumBytes: The longest PIN accepted, in bytes (a TPM key's,
    ///     ``KeyStore/Kind-swift.enum/maximumPINBytes``); asked again like a short one.
    ///   - confirm: Whether to ask a second time and compare.
    /// - Returns: The new PIN, for the key store to encrypt the key with.
    /// - Throws: ``KeyAuthError/Code-swift.struct/invalidArgument`` when the PIN is shorter than
    ///   `minimumLength`, longer than `maximumBytes` or the two entries differ; the reader's
    ///   errors.
    public func newPIN(minimumLength: Int, maximumBytes: Int = .max, confirm: Bool = true) async throws(KeyAuthError)
        -> SecretBytes
    {
        // Only a person who confirms can be asked again; a single answer from a script stands.
        let tries = confirm ? max(1, attemptsPerRun) : 1
        var attempt = 1
        var previous: KeyAuthError?
        while true {
            do {
                return try await readNewPIN(minimumLength: minimumLength, maximumBytes: maximumBytes, confirm: confirm)
            } catch {
                if error.code == .cancelled, let previous { throw previous }
                guard error.code == .invalidArgument, attempt < tries else { throw error }
                reader.display(error.message + " Try again.", isError: true)
                previous = error
                attempt += 1
            }
        }
    }

    /// One round of ``newPIN(minimumLength:maximumBytes:confirm:)``.
    private func readNewPIN(minimumLength: Int, maximumBytes: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes
    {
        let pin = try await BlockingThread.read(reader, prompt: "New PIN (at least \(minimumLength) characters): ")
        let length = pin.withUnsafeBytes { bytes in
            // Counting scalar starts avoids decoding the PIN into a String that cannot be wiped.
            bytes.reduce(0) { count, byte in byte & 0xC0 == 0x80 ? count : count + 1 }
        }
        guard length >= minimumLength else {
            throw KeyAuthError(.invalidArgument, "A PIN needs at least \(minimumLength) characters.")
        }
        guard pin.count <= maximumBytes else {
            throw KeyAuthError(.invalidArgument, "This key's PIN has at most \(maximumBytes) bytes.")
        }
        guard confirm else { return pin }
        let repeated = try await BlockingThread.read(reader, prompt: "Repeat the new PIN: ")
        guard pin.constantTimeEquals(repeated) else {
            throw KeyAuthError(.invalidArgument, "The two PINs differ.")
        }
        return pin
    }

    /// Asks for the PIN under `reason`; an empty answer proves nothing.
    private func readPIN(reason: String) async throws(KeyAuthError) -> SecretBytes {
        let pin = try await BlockingThread.read(reader, prompt: reason.isEmpty ? "PIN: " : "\(reason)\nPIN: ")
        guard pin.count > 0 else {
            throw KeyAuthError(.presenceDenied, "no PIN was entered")
        }
        return pin
    }

    /// The delay that `failures` consecutive wrong PINs impose, in seconds.
    static func delay(afterFailures failures: Int) -> Int {
        guard failures >= freeAttempts else { return 0 }
        // 30 s << 7 already exceeds the cap; a smaller shift keeps huge counts from overflowing.
        let shift = min(failures - freeAttempts, 7)
        return min(baseDelay << shift, maximumDelay)
    }

    /// Seconds until the next attempt is allowed, or nil when it is allowed now.
    static func retryAfter(_ state: AttemptState, now: Int64) -> Int? {
        let delay = Int64(delay(afterFailures: state.failures))
        guard delay > 0 else { return nil }
        // A clock set backwards must not lengthen the wait beyond one full delay; the time comes
        // from a file, so a corrupt one must not make the subtraction trap either.
        let elapsed = max(0, now.subtractingSaturating(state.lastFailure))
        guard elapsed < delay else { return nil }
        return Int(delay - elapsed)
    }

    static func describe(seconds: Int) -> String {
        if seconds < 60 {
            return "\(seconds) second\(seconds == 1 ? "" : "s")"
        }
        let minutes = (seconds + 59) / 60
        return "\(minutes) minute\(minutes == 1 ? "" : "s")"
    }
}
