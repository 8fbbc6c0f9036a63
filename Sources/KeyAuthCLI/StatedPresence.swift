import KeyAuth
import Synchronization

/// An account's presence check that remembers whether it ran, so that a login assertion states
/// a presence check (`amr`, RFC 8176) only when this login made one: a key that `keyauth agent`
/// holds signs without one, and its token then says so.
final class StatedPresence: PresenceCheck {
    let base: any PresenceCheck
    private let checked = Mutex(false)

    init(_ base: any PresenceCheck) {
        self.base = base
    }

    var kind: PresenceKind { base.kind }

    func isAvailable() -> Bool { base.isAvailable() }

    func verifyPresence(reason: String) async throws(KeyAuthError) {
        try await base.verifyPresence(reason: reason)
        checked.withLock { $0 = true }
    }

    func unlock<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key) async throws(KeyAuthError)
        -> Key
    {
        let key = try await base.unlock(reason: reason, open)
        checked.withLock { $0 = true }
        return key
    }

    func unlockHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        let key = try await base.unlockHardwareKey(reason: reason, open)
        checked.withLock { $0 = true }
        return key
    }

    func secretForNewKey(reason: String, minimumLength: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes?
    {
        try await secretForNewKey(reason: reason, minimumLength: minimumLength, maximumBytes: .max, confirm: confirm)
    }

    func secretForNewKey(reason: String, minimumLength: Int, maximumBytes: Int, confirm: Bool)
        async throws(KeyAuthError) -> SecretBytes?
    {
        let secret = try await base.secretForNewKey(
            reason: reason, minimumLength: minimumLength, maximumBytes: maximumBytes, confirm: confirm)
        checked.withLock { $0 = true }
        return secret
    }

    func asksAgain(afterHardwareRefusal error: KeyAuthError, refusals: Int) -> Bool {
        base.asksAgain(afterHardwareRefusal: error, refusals: refusals)
    }

    /// The claims every assertion of this login carries: `amr`, where the key is and, once the
    /// check ran, which check it was.
    func claims(keyStore: KeyStore.Kind) -> JWTClaims {
        var claims = JWTClaims()
        let presence = checked.withLock { $0 } ? kind : .none
        claims.set("amr", strings: Self.methods(keyStore: keyStore, presence: presence))
        return claims
    }

    /// A device's statement of how it checked the user, in RFC 8176's values: where the key is
    /// (`hwk` in a TPM, `swk` a file) and the presence check (`pin`, or `user` for a PAM
    /// conversation).
    static func methods(keyStore: KeyStore.Kind, presence: PresenceKind) -> [String] {
        var methods = [
            keyStore == .tpm ? AuthenticationMethod.hardwareKey.rawValue : AuthenticationMethod.softwareKey.rawValue
        ]
        switch presence {
        case .pin: methods.append(AuthenticationMethod.pin.rawValue)
        case .pam: methods.append(AuthenticationMethod.userPresence.rawValue)
        case .none: break
        }
        return methods
    }
}
