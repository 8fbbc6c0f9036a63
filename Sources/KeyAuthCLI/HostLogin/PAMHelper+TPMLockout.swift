import KeyAuth

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
    /// read before the PIN is asked, so prompts open at the same moment each pass this check
    /// before any of their PINs counts: the reserve holds against PINs typed one prompt after
    /// another, and only as many concurrent prompts as it has tries (sshd's `MaxStartups`).
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

    /// The tries host logins leave to the `keyauth` command: a quarter of the TPM's (8 of the
    /// usual 32), none for a TPM with fewer than 4.
    static func reservedTries(_ info: TPMInfo) -> Int {
        info.maximumTries / 4
    }
}
