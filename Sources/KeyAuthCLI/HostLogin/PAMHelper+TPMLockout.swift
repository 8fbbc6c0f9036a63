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
    /// check of it (``spendPINTry(_:key:on:lock:lockWait:)``): prompts open at the same moment each pass
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
    /// step across the helpers of the machine. In `/run`, where only root creates files, so that
    /// no user can plant it or open it; the helper opens it as root, before it becomes the user,
    /// and holds it only while the TPM checks a PIN.
    static let tpmTryLockPath = "/run/keyauth-tpm-tries.lock"

    /// How long a PIN waits for the helpers before it to have the TPM check theirs: 5 s, or half
    /// the module's `timeout` when that is shorter, so that the login still has time for the
    /// server. A helper runs as its user once it holds the lock, and its user can stop it there;
    /// the others then go on without the lock after the wait, as before it existed, rather than
    /// refuse every TPM login of the machine.
    static func tpmTryLockWait(answerTimeoutSeconds: Int) -> Duration {
        min(.seconds(5), .milliseconds(max(answerTimeoutSeconds, 0) * 500))
    }

    /// The descriptor of ``tpmTryLockPath``, or nil when the helper does not run as root (a
    /// screen locker's, for the user's own session) or cannot open it.
    static func openTPMTryLock(path: String = tpmTryLockPath) -> Int32? {
        guard geteuid() == 0 else { return nil }
        let descriptor = open(path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        return descriptor >= 0 ? descriptor : nil
    }

    /// Spends one of the TPM's tries on `pin`, in one step with a fresh look at how many are
    /// left: under `lock`, the lockout state is read again (``tpmLockoutState(_:)``) and the TPM
    /// checks the PIN (one signature, discarded). Prompts opened at once otherwise each passed the
    /// look before any of their PINs counted, and as many wrong PINs as prompts went through
    /// the reserve, up to the lockout. The login's own signature then uses a PIN the TPM took.
    /// An empty answer (Enter, to go on to the next PAM module) is left to the PIN check, which
    /// refuses it without the TPM: signing with it would count a wrong PIN.
    ///
    /// - Parameter lockWait: how long to wait for the lock (``tpmTryLockWait(answerTimeoutSeconds:)``)
    ///   before looking without it.
    /// - Throws: `.lockedOut` when the tries left are the reserve's (or none); `.wrongPIN` from
    ///   the TPM.
    static func spendPINTry(
        _ pin: SecretBytes, key: TPMKey, on tpm: TPMConnection, lock: Int32?, lockWait: Duration
    ) throws(KeyAuthError) {
        guard pin.count > 0 else { return }
        let locked = lock.map { takeLock($0, waiting: lockWait) } ?? false
        defer { if locked, let lock { flock(lock, LOCK_UN) } }
        if case .locked(let reason) = tpmLockoutState(try? tpm.info()) { throw KeyAuthError(.lockedOut, reason) }
        try key.checkPIN(pin, on: tpm)
    }

    /// Takes `lock` exclusively within `waiting`; false when it stayed taken.
    private static func takeLock(_ lock: Int32, waiting: Duration) -> Bool {
        let deadline = ContinuousClock.now + waiting
        while flock(lock, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline else { return false }
            usleep(10_000)
        }
        return true
    }

    /// The tries host logins leave to the `keyauth` command: a quarter of the TPM's (8 of the
    /// usual 32), none for a TPM with fewer than 4.
    static func reservedTries(_ info: TPMInfo) -> Int {
        info.maximumTries / 4
    }
}
