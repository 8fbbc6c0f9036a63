import KeyAuth

/// A presence check that cannot run here (no terminal to ask the PIN on), standing in for the
/// account's own until the key is actually needed.
///
/// `keyauth token` from cron or a systemd service has no terminal, and needs none while a
/// stored token is valid: failing when the session opened would make scripts fail for nothing.
/// Every use throws the error the real check could not be made for, before anything is signed.
struct UnavailablePresence: PresenceCheck {
    let kind: PresenceKind
    /// Why the check cannot run, with what to do instead (`--pin-stdin`).
    let reason: KeyAuthError

    func isAvailable() -> Bool { false }

    func verifyPresence(reason: String) async throws(KeyAuthError) {
        throw self.reason
    }

    func unlock<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key) async throws(KeyAuthError)
        -> Key
    {
        throw self.reason
    }

    func unlockHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        throw self.reason
    }

    func secretForNewKey(reason: String, minimumLength: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes?
    {
        throw self.reason
    }
}
