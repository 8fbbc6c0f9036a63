/// Skips the presence check, for machines with nobody in front of them (CI runners, servers).
///
/// The flow asks for a check on every use of the device key; choosing this one must be explicit
/// (`keyauth register --presence none`), so that nobody loses the check by accident.
/// - Warning: with no check, anyone or anything that runs as this user (a compromised build
///   script, a malicious dependency) can use the device key and sign in as this device without
///   being noticed. Combine it with server-side limits (a short token lifetime, device approval).
public struct NoPresence: PresenceCheck {
    /// No check, recorded so that a key registered this way is visibly unprotected.
    public var kind: PresenceKind { .none }

    /// Creates the opt-out.
    public init() {}

    /// Always true: skipping needs nothing.
    public func isAvailable() -> Bool { true }

    /// Returns at once; the reason is not shown because nobody is there to read it.
    public func verifyPresence(reason: String) async throws(KeyAuthError) {}
}
