import KeyAuth
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The PIN reader of `keyauth-pam-helper`: reads the one PIN the module sends, when a check
/// first asks for it, and keeps it so that an offline login (``PAMHelper``, "Offline grants")
/// can unlock the key with the same PIN after the online attempt found no server.
///
/// Each round hands the PIN out once; a second request in the same round is answered as input
/// that ended (``KeyAuthError/Code-swift.struct/cancelled``), so a check that would ask again
/// after a wrong PIN stops with the wrong PIN as its outcome, exactly as with standard input. The
/// held copy lives in ``SecretBytes``, overwritten when the reader goes.
final class HeldPINReader: SecretReader {
    /// A check of the PIN as it comes from the socket, before anything uses it.
    typealias PINCheck = @Sendable (SecretBytes) throws(KeyAuthError) -> Void

    private struct State {
        var pin: SecretBytes?
        var handedOut = false
        var askedAt: ContinuousClock.Instant?
        var arrivedAt: ContinuousClock.Instant?
        var check: PINCheck?
        /// What the check threw: every later round throws it too, with no PIN held.
        var checkFailure: KeyAuthError?
    }

    private let descriptor: Int32
    private let source: StandardInputSecretReader
    private let state = Mutex(State())

    /// When the PIN came from the socket, which starts the module's wait for the final answer;
    /// nil before.
    ///
    /// The helper reads the PIN only when the login needs it, after reaching the server. A PIN
    /// already waiting then may have come any time since it was asked for, so that time is
    /// taken: an estimate of the module's wait from the read would leave the helper working
    /// after the module gave up on it.
    var arrivedAt: ContinuousClock.Instant? { state.withLock { $0.arrivedAt } }

    /// A reader of the module's socket `descriptor`.
    init(fileDescriptor descriptor: Int32) {
        self.descriptor = descriptor
        source = StandardInputSecretReader(fileDescriptor: descriptor)
    }

    /// Runs `check` on the PIN when it is read from the socket, before it is handed out; a PIN
    /// the check refuses is not held (``PAMHelper/spendPINTry(_:key:on:lock:lockWait:)``).
    func checkEachPIN(with check: @escaping PINCheck) {
        state.withLock { $0.check = check }
    }

    /// Notes that the module was just asked for the PIN (the `pin` line written).
    func noteAsked(at time: ContinuousClock.Instant = .now) {
        state.withLock { $0.askedAt = time }
    }

    /// The PIN: read from the socket the first time, a copy of the held one in a later round.
    ///
    /// - Throws: `.cancelled` when this round already had it, or when the socket ended.
    func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        let held = state.withLock { state -> Result<SecretBytes?, KeyAuthError> in
            guard !state.handedOut else { return .failure(KeyAuthError(.cancelled, "the PIN was already used")) }
            if let failure = state.checkFailure { return .failure(failure) }
            state.handedOut = true
            return .success(state.pin)
        }
        if let pin = try held.get() { return pin.withUnsafeBytes { SecretBytes($0) } }
        let waitingAlready = hasInput()
        let pin = try source.readLine(prompt: prompt, echo: echo)
        let now = ContinuousClock.now
        let check = state.withLock { state -> PINCheck? in
            state.arrivedAt = Self.arrival(waitingAlready: waitingAlready, askedAt: state.askedAt, readAt: now)
            return state.check
        }
        do throws(KeyAuthError) {
            try check?(pin)
        } catch {
            state.withLock { $0.checkFailure = error }
            throw error
        }
        state.withLock { $0.pin = pin }
        return pin.withUnsafeBytes { SecretBytes($0) }
    }

    /// When a PIN read at `readAt` arrived, as far as the module's clock goes: then, when the
    /// read waited for it; when it was asked for (or, not noted, then), when it was waiting.
    static func arrival(
        waitingAlready: Bool, askedAt: ContinuousClock.Instant?, readAt: ContinuousClock.Instant
    ) -> ContinuousClock.Instant {
        waitingAlready ? (askedAt ?? readAt) : readAt
    }

    /// Whether the socket has something to read now.
    private func hasInput() -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) == 1
    }

    /// Starts a new round, in which the held PIN (or, if none was read yet, the socket's) is
    /// handed out once more.
    func startNewRound() {
        state.withLock { $0.handedOut = false }
    }
}
