#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Asks a person for a PIN, a password or another answer, and shows them messages.
///
/// Presence checks never talk to a terminal themselves: they ask a reader, so that the command
/// line can use the terminal or standard input, an embedding app its own dialog, and tests a
/// scripted queue of answers.
///
/// Reading is synchronous: it blocks the calling thread until the person answers. A PAM stack
/// asks from the PAM thread, which may block; the library's async callers (``PINPresence``) run
/// the read on a thread of their own, never on the cooperative pool.
public protocol SecretReader: Sendable {
    /// Reads one answer without showing it, as a PIN or password must not be shown.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/presenceUnavailable`` when there is nobody to
    ///   ask (no terminal), ``KeyAuthError/Code-swift.struct/cancelled`` when input ended.
    func readSecret(prompt: String) throws(KeyAuthError) -> SecretBytes

    /// Reads one answer, shown while typed when `echo` is true (a user name, a one-time code).
    ///
    /// The answer is still returned as ``SecretBytes``: a PAM module decides what is secret, and
    /// treating every answer as one costs nothing.
    /// - Throws: as ``readSecret(prompt:)``.
    func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes

    /// Shows an informational or error message from the check (PAM's `PAM_TEXT_INFO` and
    /// `PAM_ERROR_MSG`), without waiting for an answer.
    func display(_ message: String, isError: Bool)

    /// Whether the reader can ask anybody here, so that a check can report itself unavailable
    /// instead of failing halfway through a prompt.
    func isAvailable() -> Bool
}

extension SecretReader {
    /// Reads with echo off; readers that are not terminals need nothing more specific.
    public func readSecret(prompt: String) throws(KeyAuthError) -> SecretBytes {
        try readLine(prompt: prompt, echo: false)
    }

    /// Writes the message to standard error, where it does not mix with a command's output.
    public func display(_ message: String, isError: Bool) {
        DescriptorIO.writeAll(STDERR_FILENO, message + "\n")
    }

    /// Most readers can always ask; the terminal reader checks for a terminal.
    public func isAvailable() -> Bool { true }
}
