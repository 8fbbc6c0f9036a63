import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// Everything a command touches outside the keyauth home: output streams, standard input, the
/// environment, whether streams are terminals, and the terminal prompt.
///
/// The binary passes ``standard()``; tests pass writers that collect text, a pipe for standard
/// input and a scripted ``SecretReader``, so that commands run in-process without a terminal.
public struct CommandIO: Sendable {
    /// Writes text to standard output (tokens, keys, `--json` documents).
    package var writeOutput: @Sendable (String) -> Void
    /// Writes text to standard error (errors, progress, approval hints).
    package var writeError: @Sendable (String) -> Void
    /// The descriptor `--pin-stdin` reads from.
    package var standardInput: Int32
    /// The environment: `KEYAUTH_HOME`, `XDG_DATA_HOME`, `HOME`, `KEYAUTH_TIMEOUT`.
    package var environment: [String: String]
    /// Whether standard error is a terminal: spinners are drawn only then.
    package var isErrorTerminal: Bool
    /// Asks for PINs and PAM answers when `--pin-stdin` is not given.
    package var terminalReader: any SecretReader
    /// The default device name.
    package var hostName: String
    /// A directory read instead of `/etc/pam.d`, for tests of `--presence pam`.
    package var pamConfigurationDirectory: String?
    /// The wait between polls while a registration is pending; 5 s as RFC 8628 asks.
    package var pollInterval: Duration

    /// Creates an I/O set; every member has the meaning documented on its property.
    package init(
        writeOutput: @escaping @Sendable (String) -> Void, writeError: @escaping @Sendable (String) -> Void,
        standardInput: Int32, environment: [String: String], isErrorTerminal: Bool,
        terminalReader: any SecretReader, hostName: String, pamConfigurationDirectory: String? = nil,
        pollInterval: Duration = .seconds(5)
    ) {
        self.writeOutput = writeOutput
        self.writeError = writeError
        self.standardInput = standardInput
        self.environment = environment
        self.isErrorTerminal = isErrorTerminal
        self.terminalReader = terminalReader
        self.hostName = hostName
        self.pamConfigurationDirectory = pamConfigurationDirectory
        self.pollInterval = pollInterval
    }

    /// The process's own streams, environment and terminal.
    public static func standard() -> CommandIO {
        CommandIO(
            writeOutput: { DescriptorIO.writeAll(STDOUT_FILENO, $0) },
            writeError: { DescriptorIO.writeAll(STDERR_FILENO, $0) },
            standardInput: STDIN_FILENO, environment: ProcessInfo.processInfo.environment,
            isErrorTerminal: isatty(STDERR_FILENO) == 1, terminalReader: TerminalSecretReader(),
            hostName: currentHostName())
    }

    /// Writes one line to standard output.
    func printOutput(_ line: String) {
        writeOutput(line + "\n")
    }

    /// Writes one line to standard error, with what a terminal would take for a command (escape
    /// and other control characters, C1 controls, bidirectional overrides and other format
    /// characters) as spaces: such lines carry servers' text (an error's message, a renewal's
    /// log line in the agent), and a message built from a server's field must not reach the
    /// terminal as escapes. Line breaks and tabs stay.
    func printError(_ line: String) {
        writeError(Self.terminalSafe(line) + "\n")
    }

    /// `text` with every scalar ``OAuthError/isUnprintable(_:)`` finds, but line breaks and tabs,
    /// replaced by a space.
    static func terminalSafe(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { OAuthError.isUnprintable($0) && $0 != "\n" && $0 != "\t" }) else {
            return text
        }
        return String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { OAuthError.isUnprintable($0) && $0 != "\n" && $0 != "\t" ? " " : $0 }))
    }

    private static func currentHostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
