import Foundation

/// Counts wrong PINs of a key file in its attempts file and enforces the delay after
/// ``PINPresence/freeAttempts`` failures, for every process that tries a PIN on the key.
///
/// The count is the only thing that slows down guessing through keyauth, so it must not depend
/// on who asked for the PIN: ``PINPresence`` counts what it asked a person for, and
/// `keyauth agent` counts a PIN that arrives on its socket the same way, with this type. It is
/// synchronous because the decryption it guards is, and a caller that is not in an async context
/// (the agent's serving thread) must be able to use it.
package struct PINAttemptCounter: Sendable {
    /// The file that counts wrong PINs, normally `<keydir>/pin-attempts`.
    package let attemptsFile: String
    /// The clock that times the delays.
    package let clock: KeyAuthClock
    /// The `close` and `fsync` that writes and removals of the attempts file use; tests fail them.
    let durability: SecureFile.DurabilityCalls

    package init(attemptsFile: String, clock: KeyAuthClock = .system) {
        self.init(attemptsFile: attemptsFile, clock: clock, durability: .system)
    }

    init(attemptsFile: String, clock: KeyAuthClock, durability: SecureFile.DurabilityCalls) {
        self.attemptsFile = attemptsFile
        self.clock = clock
        self.durability = durability
    }

    /// Fails while earlier wrong PINs still impose a delay, so that nobody is asked for a PIN
    /// that would be refused unread.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/lockedOut`` with `retryAfter`;
    ///   ``KeyAuthError/Code-swift.struct/storageFailed`` when the attempts file cannot be read.
    package func checkLockout() throws(KeyAuthError) {
        let store = AttemptStore(path: attemptsFile, durability: durability)
        var state = try store.load()
        if state.lastFailure > clock.seconds {
            // Written back, so that the wait counts from now and not again from each look.
            try? store.update { clampToNow(&$0) }
            clampToNow(&state)
        }
        try checkLockout(state)
    }

    /// Moves a failure recorded in the future to now. The clock was set back since (NTP after a
    /// hardware clock in local time, say): measured from that time, the delay would last as
    /// long as the step back on top of itself while each message said "try again in 30
    /// seconds". At most one full delay then, as ``PINPresence/retryAfter(_:now:)`` promises.
    private func clampToNow(_ state: inout AttemptState) {
        let now = clock.seconds
        if state.lastFailure > now { state.lastFailure = now }
    }

    /// Runs `body`, which tries a PIN on the key, as one counted attempt.
    ///
    /// The attempt is counted as a failure before `body` runs, so that a process killed during a
    /// guess, or several processes guessing at once, cannot escape the count; a success resets it
    /// and an error other than a wrong PIN takes the attempt back.
    ///
    /// The reset removes the attempts file rather than writing a zero into it, as a removal needs
    /// no free space: on a full disk the +1 can still fit into the blocks the file already had,
    /// a new file cannot. A reset that fails even so (a read-only or failing disk) does not fail
    /// the right PIN: `body` already used the key, and the count errs on the safe side by keeping
    /// this attempt as a wrong one, which `warning` reports.
    /// - Parameter warning: Receives one line when the reset after a right PIN failed.
    /// - Throws: ``KeyAuthError/Code-swift.struct/lockedOut`` with `retryAfter` before `body`
    ///   runs when too many wrong PINs were entered recently;
    ///   ``KeyAuthError/Code-swift.struct/wrongPIN`` (with `retryAfter` when this failure starts a
    ///   delay); ``KeyAuthError/Code-swift.struct/storageFailed`` when the attempts file cannot be
    ///   used; `body`'s other errors.
    package func counting<Value>(
        warning: (String) -> Void = { _ in },
        _ body: () throws(KeyAuthError) -> Value
    ) throws(KeyAuthError) -> Value {
        let store = AttemptStore(path: attemptsFile, durability: durability)
        var lockout: KeyAuthError?
        try store.update { (state) throws(KeyAuthError) in
            clampToNow(&state)
            // Another process may have failed since the caller last looked. A lockout still
            // writes the clamped time (an error thrown here would discard it).
            do throws(KeyAuthError) {
                try checkLockout(state)
            } catch {
                lockout = error
                return
            }
            // Saturating: the count comes from a file, and a damaged one must not make this trap.
            state.failures = state.failures.addingSaturating(1)
            state.lastFailure = clock.seconds
        }
        if let lockout { throw lockout }
        let result: Value
        do {
            result = try body()
        } catch {
            guard error.code == .wrongPIN else {
                try? store.update { state in state.failures = max(0, state.failures - 1) }
                throw error
            }
            throw wrongPINError(after: try? store.load(), underlying: error)
        }
        do {
            try store.reset()
        } catch {
            warning(
                "keyauth: the PIN was right, but the count of wrong PINs could not be reset (\(error.message)); "
                    + "this attempt may still count as a wrong one until the next right PIN")
        }
        return result
    }

    /// Throws `.lockedOut` when `state` still imposes a delay.
    private func checkLockout(_ state: AttemptState) throws(KeyAuthError) {
        guard let seconds = PINPresence.retryAfter(state, now: clock.seconds) else { return }
        throw KeyAuthError(
            .lockedOut,
            "too many wrong PINs; try again in \(PINPresence.describe(seconds: seconds))",
            retryAfter: seconds
        )
    }

    private func wrongPINError(after state: AttemptState?, underlying: KeyAuthError) -> KeyAuthError {
        guard let state else {
            return KeyAuthError(.wrongPIN, "wrong PIN", underlying: underlying)
        }
        if let seconds = PINPresence.retryAfter(state, now: clock.seconds) {
            return KeyAuthError(
                .wrongPIN,
                "wrong PIN; too many wrong PINs; try again in \(PINPresence.describe(seconds: seconds))",
                underlying: underlying,
                retryAfter: seconds
            )
        }
        let left = PINPresence.freeAttempts - state.failures
        return KeyAuthError(
            .wrongPIN,
            "wrong PIN; a delay starts after \(left) more wrong PIN\(left == 1 ? "" : "s")",
            underlying: underlying
        )
    }
}

/// What the attempts file holds.
struct AttemptState: Codable, Equatable {
    /// Consecutive wrong PINs (and attempts in progress).
    var failures = 0
    /// When the last of them started, in seconds since 1970.
    var lastFailure: Int64 = 0
}

/// The attempts file: read without a lock, changed under an exclusive `flock` on a separate lock
/// file and replaced atomically, so that a crash never leaves half a file and concurrent
/// processes never lose a failure.
struct AttemptStore {
    let path: String
    var durability: SecureFile.DurabilityCalls = .system

    private var lockPath: String { path + ".lock" }

    /// The current state; a missing file means no failures.
    func load() throws(KeyAuthError) -> AttemptState {
        let bytes: [UInt8]
        do {
            bytes = try SecureFile.readProtected(path)
        } catch  where error.code == .keyNotFound {
            return AttemptState()
        } catch  where error.code == .keyUnprotected {
            // Kept as it is: PROTOCOL.md section 7 makes a too-open secret exit 65, with its chmod.
            throw error
        } catch {
            throw KeyAuthError(.storageFailed, "Cannot use the PIN attempts file: \(error.message)", underlying: error)
        }
        guard let state = try? JSONDecoder().decode(AttemptState.self, from: Data(bytes)), state.failures >= 0 else {
            // Failing closed: a damaged counter must not silently become zero failures.
            throw KeyAuthError(
                .storageFailed, "The PIN attempts file \(path) is damaged; remove it to continue.")
        }
        return state
    }

    /// Changes the state under the lock and writes it back atomically.
    func update(_ change: (inout AttemptState) throws(KeyAuthError) -> Void) throws(KeyAuthError) {
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            var state = try load()
            let before = state
            try change(&state)
            guard state != before else { return }
            guard let data = try? JSONEncoder().encode(state) else {
                throw KeyAuthError(.storageFailed, "Cannot encode the PIN attempts.")
            }
            try SecureFile.write(Array(data) + [0x0A], to: path, calls: durability)
        }
    }

    /// Back to no failures, by removing the file under the lock: an `unlink` needs no free space.
    func reset() throws(KeyAuthError) {
        try SecureFile.withExclusiveLock(lockPath) { () throws(KeyAuthError) in
            try SecureFile.remove(path, calls: durability)
        }
    }
}
