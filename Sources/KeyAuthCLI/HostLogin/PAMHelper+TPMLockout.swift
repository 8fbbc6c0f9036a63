import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

extension PAMHelper {
    /// What the TPM's dictionary-attack state means for a host login by a TPM-held key, decided
    /// before the PIN is asked: a locked TPM refuses even the right PIN, so the user is told so,
    /// with the wait, instead of typing a PIN for nothing; a TPM that has counted wrong PINs
    /// says in the prompt how many more it takes.
    enum TPMLockoutState: Equatable {
        /// Ask the PIN, with this note after the prompt's text (empty when nothing was counted).
        case ask(note: String)
        /// Refuse without asking, for this reason.
        case locked(String)
    }

    /// The state `info` describes; nil (the TPM did not answer) asks the PIN, and the login
    /// then fails with the TPM's own error.
    ///
    /// Host logins stop short of the lockout, leaving the TPM's last quarter of tries
    /// (``reservedTries(_:)``) to the `keyauth` command: anyone who reaches a login prompt (an
    /// ssh client from anywhere, with `mode=local`) may type PINs, and a locked TPM refuses every
    /// key on the machine, every user's, and whatever else it holds (a disk's key). The state is
    /// read before the PIN is asked, and again when the PIN has come, as one step with the TPM's
    /// check of it (``spendPINTry(_:key:on:lock:)``): prompts open at the same moment each pass
    /// the first look, and the second sees the tries spent by the PINs typed before.
    static func tpmLockoutState(_ info: TPMInfo?) -> TPMLockoutState {
        guard let info else { return .ask(note: "") }
        if info.isLockedOut || info.attemptsLeft == 0 {
            let wait =
                info.lockoutInterval > 0
                ? "for up to \(info.lockoutInterval) seconds"
                : "until its owner resets the lockout"
            return .locked("the TPM is locked after too many wrong PINs and refuses its keys \(wait)")
        }
        let attempts = info.attemptsLeft == 1 ? "1 more wrong PIN" : "\(info.attemptsLeft) more wrong PINs"
        let reserved = reservedTries(info)
        if reserved > 0, info.attemptsLeft <= reserved {
            let recovery =
                info.lockoutInterval > 0
                ? "it forgets one wrong PIN every \(info.lockoutInterval) seconds"
                : "it forgets none until its owner resets the lockout"
            return .locked(
                "the TPM takes only \(attempts) before it locks every key on this machine, and host logins leave "
                    + "those to keyauth login so that no one at a login prompt can lock it; \(recovery)")
        }
        guard info.lockoutCounter > 0 else { return .ask(note: "") }
        return .ask(note: " (the TPM locks after \(attempts))")
    }

    /// The lock that makes a host login's look at the TPM's tries and its spending of one a single
    /// step across every helper of the machine. In `/run`, where only root creates files, so
    /// that no user can hold it (or plant it); the helper opens it as root, before it becomes
    /// the user.
    static let tpmTryLockPath = "/run/keyauth-tpm-tries.lock"

    /// How long a PIN waits for the helpers before it to have the TPM check theirs.
    static let tpmTryLockWait = Duration.seconds(10)

    /// The descriptor of ``tpmTryLockPath``, or nil when the helper does not run as root (a
    /// screen locker's, for the user's own session) or cannot open it.
    static func openTPMTryLock(path: String = tpmTryLockPath) -> Int32? {
        guard geteuid() == 0 else { return nil }
        let descriptor = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        return descriptor >= 0 ? descriptor : nil
    }

    /// Spends one of the TPM's tries on `pin`, in one step with a fresh look at how many are
    /// left: under `lock`, the lockout state is read again (``tpmLockoutState(_:)``) and the TPM
    /// checks the PIN (one signature, discarded). Prompts opened at once otherwise each passed the
    /// look before any of their PINs counted, and as many wrong PINs as prompts went through
    /// the reserve, up to the lockout. The login's own signature then uses a PIN the TPM took.
    ///
    /// - Throws: `.lockedOut` when the tries left are the reserve's (or none); `.wrongPIN` from
    ///   the TPM; `.tpmUnavailable` when the lock stays taken for ``tpmTryLockWait``.
    static func spendPINTry(
        _ pin: SecretBytes, key: TPMKey, on tpm: TPMConnection, lock: Int32?
    ) throws(KeyAuthError) {
        if let lock {
            let deadline = ContinuousClock.now + tpmTryLockWait
            while flock(lock, LOCK_EX | LOCK_NB) != 0 {
                guard errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline else {
                    throw KeyAuthError(.tpmUnavailable, "other host logins kept the TPM busy checking their PINs")
                }
                usleep(10_000)
            }
        }
        defer { if let lock { flock(lock, LOCK_UN) } }
        if case .locked(let reason) = tpmLockoutState(try? tpm.info()) { throw KeyAuthError(.lockedOut, reason) }
        try key.checkPIN(pin, on: tpm)
    }

    /// The tries host logins leave to the `keyauth` command: a quarter of the TPM's (8 of the
    /// usual 32), none for a TPM with fewer than 4.
    static func reservedTries(_ info: TPMInfo) -> Int {
        info.maximumTries / 4
    }
}
