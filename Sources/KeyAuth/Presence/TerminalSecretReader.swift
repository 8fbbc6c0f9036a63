#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads answers from the controlling terminal with echo off, like `getpass(3)` but without its
/// static buffer that is never wiped.
///
/// The prompt goes to the terminal, not to standard output, so that `keyauth token | jq` still
/// asks the person and not the pipe.
/// - Warning: echo is restored on every return and thrown error. A signal that ends the process
///   while a prompt waits (Control-C) skips that: a program that stops on SIGINT, SIGTERM or
///   SIGHUP should call ``restoreTerminalAfterInterrupt()`` first, or the terminal stays
///   silent until `reset`. `keyauth` does.
public struct TerminalSecretReader: SecretReader {
    /// The terminal device; `/dev/tty` is the controlling terminal whatever stdin is.
    public let devicePath: String

    /// Creates a reader on `devicePath`; tests pass the subordinate side of a pseudo-terminal.
    public init(devicePath: String = "/dev/tty") {
        self.devicePath = devicePath
    }

    /// Whether the device opens and is a terminal, so that a headless run fails before prompting.
    public func isAvailable() -> Bool {
        let descriptor = open(devicePath, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return isatty(descriptor) == 1
    }

    /// Writes `prompt` to the terminal, reads one line (echo off unless `echo`), and restores the
    /// terminal's settings; blocks until the line is complete.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/presenceUnavailable`` when there is no terminal,
    ///   ``KeyAuthError/Code-swift.struct/cancelled`` at end of input (Control-D),
    ///   ``KeyAuthError/Code-swift.struct/invalidArgument`` for a line longer than 512 bytes.
    public func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        try Self.readLine(devicePath: devicePath, prompt: prompt, echo: echo).get()
    }

    /// Writes the message to the terminal, or to standard error when there is no terminal.
    public func display(_ message: String, isError: Bool) {
        let descriptor = open(devicePath, O_WRONLY | O_NOCTTY | O_CLOEXEC)
        guard descriptor >= 0 else {
            DescriptorIO.writeAll(STDERR_FILENO, message + "\n")
            return
        }
        defer { close(descriptor) }
        DescriptorIO.writeAll(descriptor, message + "\n")
    }

    /// Puts back the settings of the terminal whose prompt is waiting, and ends its line, for a
    /// program about to stop on a signal.
    ///
    /// Only `tcsetattr`, `write` and an atomic exchange run here, all async-signal-safe, so this
    /// may be called from a `sigaction` handler once ``prepareForSignalHandlers()`` has run. The
    /// saved state is taken: a second call, or the prompt itself returning, does nothing more.
    /// - Returns: Whether a prompt was waiting; the caller should then exit rather than wait for
    ///   the prompt's thread, which is blocked in `read(2)` where no cancellation reaches it.
    @discardableResult
    public static func restoreTerminalAfterInterrupt() -> Bool {
        SavedTerminal.restore()
    }

    /// Sets up the storage that ``restoreTerminalAfterInterrupt()`` reads, for a program about to
    /// install a signal handler that calls it.
    ///
    /// Swift initialises globals on first use, which is not async-signal-safe; after this call,
    /// the handler only reads memory that already exists.
    public static func prepareForSignalHandlers() {
        SavedTerminal.prepare()
    }

    /// The read itself, with the failure as a value.
    static func readLine(devicePath: String, prompt: String, echo: Bool) -> Result<SecretBytes, KeyAuthError> {
        let descriptor = open(devicePath, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard descriptor >= 0 else {
            return .failure(LineIO.error(.presenceUnavailable, "There is no terminal to ask for the answer."))
        }
        defer { close(descriptor) }
        var original = termios()
        guard tcgetattr(descriptor, &original) == 0 else {
            return .failure(LineIO.error(.presenceUnavailable, "\(devicePath) is not a terminal."))
        }
        // Saved before echo goes off, so that a signal arriving from here on finds what to put back.
        let saved = SavedTerminal.save(descriptor, original)
        if !echo {
            var silent = original
            silent.c_lflag &= ~tcflag_t(ECHO | ECHOE | ECHOK | ECHONL)
            // TCSAFLUSH drops anything typed before the prompt, so it cannot end up as the answer.
            guard tcsetattr(descriptor, TCSAFLUSH, &silent) == 0 else {
                if saved { _ = SavedTerminal.release(descriptor) }
                return .failure(LineIO.error(.presenceUnavailable, "Cannot turn off echo on \(devicePath)."))
            }
        }
        defer {
            // A signal handler that took the saved state has restored the terminal already.
            let restoredHere = !saved || SavedTerminal.release(descriptor)
            if !echo && restoredHere {
                _ = tcsetattr(descriptor, TCSAFLUSH, &original)
                // The Enter key was not echoed either; move the cursor off the prompt line.
                DescriptorIO.writeAll(descriptor, "\n")
            }
        }
        // The prompt is written after echo is off, so whoever sees it may start typing safely.
        guard DescriptorIO.writeAll(descriptor, prompt) else {
            return .failure(LineIO.error(.presenceUnavailable, "Cannot write the prompt to \(devicePath)."))
        }
        return LineIO.readLine(from: descriptor)
    }
}
