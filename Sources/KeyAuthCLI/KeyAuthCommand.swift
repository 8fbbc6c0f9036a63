import Foundation
import KeyAuth
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The `keyauth` command: parses a command line, runs it, and turns the outcome into the exit
/// status and the single error line of PROTOCOL.md section 7.
public enum KeyAuthCommand {
    /// The version printed by `keyauth --version`.
    public static let version = KeyAuthClient.version

    /// Runs one command line and returns the exit status.
    ///
    /// Errors are printed as one line on standard error starting `keyauth: `; nothing else is
    /// printed for them, and no PIN, token or key ever appears in them.
    /// - Parameters:
    ///   - arguments: the arguments after the program name.
    ///   - io: the streams, environment and terminal to use.
    public static func run(_ arguments: [String], io: CommandIO) async -> Int32 {
        do throws(KeyAuthError) {
            let command = try CommandParser.parse(arguments)
            try await execute(command, context: CommandContext(io: io))
            return ExitCode.success.rawValue
        } catch {
            io.printError(errorLine(for: error))
            return ExitCode(for: error).rawValue
        }
    }

    /// The status after Control-C: PROTOCOL.md section 7 lists no status for it, so it is the
    /// contract's "anything else" (1), not the shell's 130.
    public static let interruptedStatus: Int32 = 1

    /// Runs like ``run(_:io:)`` and turns Control-C into a clean stop, for the binary.
    ///
    /// SIGINT cancels the command's task: a wait for approval ends with one line saying the
    /// device stays pending, and the spinner's line is erased. A blocking step that cannot see
    /// the cancellation (a terminal prompt) does not keep the person waiting: the process exits
    /// a second later regardless. Either way the status is ``interruptedStatus``.
    /// - Warning: this installs a process-wide SIGINT disposition; embedding apps should call
    ///   ``run(_:io:)`` and cancel its task themselves.
    public static func runHandlingInterrupts(_ arguments: [String], io: CommandIO) async -> Int32 {
        let interrupted = InterruptFlag()
        let task = Task { await run(arguments, io: io) }
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler {
            interrupted.set()
            task.cancel()
            DispatchQueue.global().asyncAfter(deadline: .now() + 1) { exit(interruptedStatus) }
        }
        source.resume()
        let status = await task.value
        source.cancel()
        return interrupted.isSet ? interruptedStatus : status
    }

    /// `keyauth: <message>` on one line, with control characters removed.
    static func errorLine(for error: KeyAuthError) -> String {
        let message = String(
            String.UnicodeScalarView(
                error.message.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : $0 })
        )
        return "keyauth: " + message
    }

    private static func execute(_ command: Command, context: CommandContext) async throws(KeyAuthError) {
        switch command {
        case .help(let topic):
            context.io.printOutput(topic.map(HelpText.page(for:)) ?? HelpText.overview)
        case .version:
            context.io.printOutput("keyauth \(version)")
        case .register(let options):
            try await RegisterCommand(context: context, options: options).run()
        case .login(let options):
            try await LoginCommand(context: context, options: options).run()
        case .token(let options):
            try await TokenCommand(context: context, options: options).run()
        case .status(let options):
            try StatusCommand(context: context, options: options).run()
        case .devices(let options):
            try await DevicesCommand(context: context, options: options).run()
        case .pubkey(let options):
            try PubkeyCommand(context: context, options: options).run()
        case .reset(let options):
            try await ResetCommand(context: context, options: options).run()
        }
    }
}

/// Whether SIGINT arrived, shared between the signal handler and the waiting task.
private final class InterruptFlag: Sendable {
    private let value = Mutex(false)

    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
