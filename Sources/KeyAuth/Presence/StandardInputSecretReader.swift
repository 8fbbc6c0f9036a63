#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads answers from standard input, one line each, for `--pin-stdin` and scripts.
///
/// It writes no prompt (the input is not a person) and reads byte by byte, so that the rest of
/// the input after the first newline stays unread for whoever reads standard input next.
/// - Warning: whatever feeds standard input sees the PIN; prefer a pipe from a secret store to a
///   literal in a shell command, which lands in the shell history and the process list.
public struct StandardInputSecretReader: SecretReader {
    /// The descriptor read from; tests pass a pipe.
    public let fileDescriptor: Int32

    /// The message when input ends before any byte: by default `standard input ended before an
    /// answer was given`; a caller that knows what it reads names it (`keyauth --pin-stdin`:
    /// `standard input ended before the PIN ...`).
    public let endOfInputMessage: String

    /// Creates a reader on `fileDescriptor`, standard input by default.
    public init(
        fileDescriptor: Int32 = STDIN_FILENO,
        endOfInputMessage: String = "standard input ended before an answer was given"
    ) {
        self.fileDescriptor = fileDescriptor
        self.endOfInputMessage = endOfInputMessage
    }

    /// Reads one line and strips its newline (and a carriage return before it).
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/cancelled`` with ``endOfInputMessage`` when
    ///   input ends before any byte, ``KeyAuthError/Code-swift.struct/invalidArgument`` for a
    ///   line longer than 512 bytes.
    public func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        do {
            return try LineIO.readLine(from: fileDescriptor).get()
        } catch let error where error.code == .cancelled {
            throw KeyAuthError(.cancelled, endOfInputMessage)
        }
    }
}
