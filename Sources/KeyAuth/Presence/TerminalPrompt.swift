import Foundation
import Synchronization

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
public protocol SecretReader: Sendable {
    /// Reads one answer without showing it, as a PIN or password must not be shown.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/presenceUnavailable`` when there is nobody to
    ///   ask (no terminal), ``KeyAuthError/Code-swift.struct/cancelled`` when input ended.
    func readSecret(prompt: String) async throws(KeyAuthError) -> SecretBytes

    /// Reads one answer, shown while typed when `echo` is true (a user name, a one-time code).
    ///
    /// The answer is still returned as ``SecretBytes``: a PAM module decides what is secret, and
    /// treating every answer as one costs nothing.
    /// - Throws: as ``readSecret(prompt:)``.
    func readLine(prompt: String, echo: Bool) async throws(KeyAuthError) -> SecretBytes

    /// Shows an informational or error message from the check (PAM's `PAM_TEXT_INFO` and
    /// `PAM_ERROR_MSG`), without waiting for an answer.
    func display(_ message: String, isError: Bool)

    /// Whether the reader can ask anybody here, so that a check can report itself unavailable
    /// instead of failing halfway through a prompt.
    func isAvailable() -> Bool
}

extension SecretReader {
    /// Reads with echo off; readers that are not terminals need nothing more specific.
    public func readSecret(prompt: String) async throws(KeyAuthError) -> SecretBytes {
        try await readLine(prompt: prompt, echo: false)
    }

    /// Writes the message to standard error, where it does not mix with a command's output.
    public func display(_ message: String, isError: Bool) {
        DescriptorIO.writeAll(STDERR_FILENO, message + "\n")
    }

    /// Most readers can always ask; the terminal reader checks for a terminal.
    public func isAvailable() -> Bool { true }
}

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
    /// terminal's settings.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/presenceUnavailable`` when there is no terminal,
    ///   ``KeyAuthError/Code-swift.struct/cancelled`` at end of input (Control-D),
    ///   ``KeyAuthError/Code-swift.struct/invalidArgument`` for a line longer than 512 bytes.
    public func readLine(prompt: String, echo: Bool) async throws(KeyAuthError) -> SecretBytes {
        let path = devicePath
        return try await BlockingThread.run { Self.readLine(devicePath: path, prompt: prompt, echo: echo) }
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

    /// The blocking part, run on its own thread.
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

/// The terminal settings of the prompt that is waiting, where a signal handler can reach them
/// without allocating or locking: a buffer allocated once and never freed, and an atomic that
/// says whose they are.
///
/// One slot is enough: there is one terminal and one prompt on it at a time. A second prompt
/// that finds the slot taken restores its terminal itself and is simply not covered by a signal.
private enum SavedTerminal {
    /// The descriptor whose settings are saved; `free` when none, `filling` while being saved.
    static let owner = Atomic<Int32>(free)
    /// Written only by the prompt that moved `owner` to `filling`, before it publishes its
    /// descriptor with release ordering; read only by whoever then takes the descriptor.
    nonisolated(unsafe) static let settings: UnsafeMutablePointer<termios> = {
        let buffer = UnsafeMutablePointer<termios>.allocate(capacity: 1)
        buffer.initialize(to: termios())
        return buffer
    }()
    static let free: Int32 = -1
    static let filling: Int32 = -2

    /// Touches both globals, so that their one-time setup has run before any signal handler.
    static func prepare() {
        _ = settings
        _ = owner.load(ordering: .relaxed)
    }

    /// Saves `settings` for `descriptor` if the slot is free.
    static func save(_ descriptor: Int32, _ original: termios) -> Bool {
        // Touch the buffer first, so that its one-time setup never runs inside a signal handler.
        let buffer = settings
        guard owner.compareExchange(expected: free, desired: filling, ordering: .acquiring).exchanged else {
            return false
        }
        buffer.pointee = original
        owner.store(descriptor, ordering: .releasing)
        return true
    }

    /// Takes the slot back after the prompt; false when a signal handler took it first.
    static func release(_ descriptor: Int32) -> Bool {
        owner.compareExchange(expected: descriptor, desired: free, ordering: .acquiringAndReleasing).exchanged
    }

    /// Restores the saved settings and ends the line; false when no prompt was waiting.
    static func restore() -> Bool {
        let descriptor = owner.exchange(free, ordering: .acquiring)
        guard descriptor >= 0 else { return false }
        _ = tcsetattr(descriptor, TCSAFLUSH, settings)
        var newline = UInt8(ascii: "\n")
        _ = write(descriptor, &newline, 1)
        return true
    }
}

/// Reads answers from standard input, one line each, for `--pin-stdin` and scripts.
///
/// It writes no prompt (the input is not a person) and reads byte by byte, so that the rest of
/// the input after the first newline stays unread for whoever reads standard input next.
/// - Warning: whatever feeds standard input sees the PIN; prefer a pipe from a secret store to a
///   literal in a shell command, which lands in the shell history and the process list.
public struct StandardInputSecretReader: SecretReader {
    /// The descriptor read from; tests pass a pipe.
    public let fileDescriptor: Int32

    /// Creates a reader on `fileDescriptor`, standard input by default.
    public init(fileDescriptor: Int32 = STDIN_FILENO) {
        self.fileDescriptor = fileDescriptor
    }

    /// Reads one line and strips its newline (and a carriage return before it).
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/cancelled`` when input ends before any byte,
    ///   ``KeyAuthError/Code-swift.struct/invalidArgument`` for a line longer than 512 bytes.
    public func readLine(prompt: String, echo: Bool) async throws(KeyAuthError) -> SecretBytes {
        let descriptor = fileDescriptor
        return try await BlockingThread.run { LineIO.readLine(from: descriptor) }
    }
}

/// Answers prompts from a fixed queue, for tests and for apps that already hold the answer.
///
/// It records every prompt and message, so that a test can check what a person would have been
/// asked and that a locked-out check asked nothing.
public final class FixedSecretReader: SecretReader, @unchecked Sendable {
    /// One prompt as the reader received it.
    public struct Request: Sendable, Equatable {
        /// The prompt text.
        public let prompt: String
        /// Whether the answer would have been shown while typed.
        public let echo: Bool
    }

    private let lock = NSLock()
    private var answers: [SecretBytes]
    private var recordedRequests: [Request] = []
    private var recordedMessages: [String] = []

    /// Answers each prompt with the next of `answers`; prompts after the last one are cancelled.
    public init(answers: [SecretBytes]) {
        self.answers = answers
    }

    /// Answers with the UTF-8 bytes of each string; the strings themselves are not wiped, so use
    /// this only for test data.
    public convenience init(answers: [String]) {
        self.init(answers: answers.map { SecretBytes(utf8: $0) })
    }

    /// The prompts received so far, in order.
    public var requests: [Request] {
        lock.withLock { recordedRequests }
    }

    /// The messages shown so far, in order.
    public var messages: [String] {
        lock.withLock { recordedMessages }
    }

    /// Returns the next answer.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/cancelled`` when no answer is left, as a person
    ///   closing the prompt would.
    public func readLine(prompt: String, echo: Bool) async throws(KeyAuthError) -> SecretBytes {
        let answer: SecretBytes? = lock.withLock {
            recordedRequests.append(Request(prompt: prompt, echo: echo))
            return answers.isEmpty ? nil : answers.removeFirst()
        }
        guard let answer else {
            throw KeyAuthError(.cancelled, "No answer is left for the prompt.")
        }
        return answer
    }

    /// Records the message.
    public func display(_ message: String, isError: Bool) {
        lock.withLock { recordedMessages.append(message) }
    }
}

/// Line reading and writing on raw descriptors, shared by the readers above.
enum LineIO {
    /// The longest answer accepted, PAM's own limit (`PAM_MAX_RESP_SIZE`).
    static let maximumLength = 512

    /// An error carrying `errno` as it is now.
    static func error(_ code: KeyAuthError.Code, _ message: String) -> KeyAuthError {
        let number = errno
        let native = NativeError(library: "errno", code: Int(number), text: String(cString: strerror(number)))
        return KeyAuthError(code, message, underlying: native)
    }

    /// Reads one line byte by byte into a buffer that is wiped afterwards.
    ///
    /// A line ends at a newline or at end of input after at least one byte; a trailing carriage
    /// return is dropped, so that input from Windows editors works.
    static func readLine(
        from descriptor: Int32,
        maximumLength: Int = maximumLength
    ) -> Result<SecretBytes, KeyAuthError> {
        var buffer = [UInt8](repeating: 0, count: maximumLength + 1)
        defer { Crypto.wipe(&buffer) }
        var length = 0
        var sawInput = false
        while true {
            var byte: UInt8 = 0
            let count = read(descriptor, &byte, 1)
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(error(.presenceUnavailable, "Reading the answer failed."))
            }
            if count == 0 {
                guard sawInput else {
                    return .failure(KeyAuthError(.cancelled, "Input ended before an answer was given."))
                }
                break
            }
            sawInput = true
            if byte == UInt8(ascii: "\n") { break }
            guard length < maximumLength + 1 else { continue }
            buffer[length] = byte
            length += 1
            byte = 0
        }
        if length > 0, buffer[length - 1] == UInt8(ascii: "\r") {
            length -= 1
        }
        guard length <= maximumLength else {
            return .failure(
                KeyAuthError(.invalidArgument, "The answer is longer than \(maximumLength) bytes."))
        }
        return .success(SecretBytes(buffer[0..<length]))
    }
}
