import Foundation

/// Proves that a person is at the machine before the device key is used.
///
/// On macOS the original keyauth asked Touch ID; on Linux there is no such sensor everywhere, so the
/// check is pluggable: a PIN that also decrypts the key (``PINPresence``), the system's own
/// authentication stack (``PAMPresence``), or an explicit opt-out for headless machines
/// (``NoPresence``). The flow depends only on this protocol, so tests and embedding apps can
/// supply their own.
public protocol PresenceCheck: Sendable {
    /// Which kind of check this is, so that the key store can record how a key is protected.
    var kind: PresenceKind { get }

    /// Whether the check can run here at all (a terminal exists, a PAM service is configured).
    ///
    /// The analog of Touch ID's `isTouchIDAuthenticationAvailable`: callers use it to choose a
    /// check or to explain why none is usable, before they prompt anyone.
    func isAvailable() -> Bool

    /// Asks the user to prove presence and returns only when they did.
    ///
    /// - Parameter reason: Why the key is needed, shown to the user ("Sign in to example.com").
    /// - Throws: ``KeyAuthError`` with ``KeyAuthError/Code-swift.struct/presenceDenied`` when the
    ///   user failed, ``KeyAuthError/Code-swift.struct/presenceUnavailable`` when the check cannot
    ///   run, ``KeyAuthError/Code-swift.struct/lockedOut`` after too many failures, or
    ///   ``KeyAuthError/Code-swift.struct/cancelled``.
    func verifyPresence(reason: String) async throws(KeyAuthError)
}

/// The kinds of presence check, stored next to a key so that later runs use the same one.
public enum PresenceKind: String, Sendable, Codable {
    /// A PIN that also encrypts the private key at rest.
    case pin
    /// The system's PAM stack (a password, a fingerprint reader, a hardware token).
    case pam
    /// No check at all; only for machines without a person in front of them.
    case none
}

/// Runs blocking work (a terminal read, a PAM transaction) on its own thread.
///
/// The cooperative thread pool has as many threads as cores; a `read(2)` that waits for a person
/// to type would starve every other task of one of them. A dedicated thread per prompt is cheap
/// next to the seconds a person takes to answer.
enum BlockingThread {
    /// Runs `body` on a new thread and resumes with its result.
    static func run<Value: Sendable>(
        _ body: @escaping @Sendable () -> Result<Value, KeyAuthError>
    ) async throws(KeyAuthError) -> Value {
        if Task.isCancelled {
            throw KeyAuthError(.cancelled, "The prompt was cancelled before it started.")
        }
        let result: Result<Value, KeyAuthError> = await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: body()) }
            thread.name = "keyauth-blocking"
            thread.start()
        }
        return try result.get()
    }
}
