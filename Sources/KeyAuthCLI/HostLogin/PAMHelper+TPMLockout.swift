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
    static func tpmLockoutState(_ info: TPMInfo?) -> TPMLockoutState {
        guard let info else { return .ask(note: "") }
        if info.isLockedOut || info.attemptsLeft == 0 {
            let wait =
                info.lockoutInterval > 0
                ? "for up to \(info.lockoutInterval) seconds"
                : "until its owner resets the lockout"
            return .locked("the TPM is locked after too many wrong PINs and refuses its keys \(wait)")
        }
        guard info.lockoutCounter > 0 else { return .ask(note: "") }
        let attempts = info.attemptsLeft == 1 ? "1 more wrong PIN" : "\(info.attemptsLeft) more wrong PINs"
        return .ask(note: " (the TPM locks after \(attempts))")
    }
}
