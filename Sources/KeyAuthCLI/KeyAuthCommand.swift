import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The `keyauth` command: parses a command line, runs it, and turns the outcome into the exit
/// status and the single error line of PROTOCOL.md section 7.
public enum KeyAuthCommand {
    /// The version printed by `keyauth --version`.
    package static let version = KeyAuthClient.version

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
            return try await execute(command, context: CommandContext(io: io)).rawValue
        } catch {
            io.printError(errorLine(for: withNextStep(error)))
            return ExitCode(for: error).rawValue
        }
    }

    /// What ends a PIN lockout's message: where someone who forgot the PIN reads what to do
    /// (`keyauth reset --help`, and "Forgot the PIN?" in docs/COMMANDS.md).
    package static let forgotPINPointer = " (forgot the PIN? see keyauth reset --help)"

    /// `error`, with the next step added where its message alone leaves a person stuck: a PIN
    /// lockout (a key file's delay, the TPM's lockout, or the wrong PIN that started a delay)
    /// ends with ``forgotPINPointer``. The code, and so the exit status (77), stays.
    static func withNextStep(_ error: KeyAuthError) -> KeyAuthError {
        let lockedOut = error.code == .lockedOut || (error.code == .wrongPIN && error.retryAfter != nil)
        guard lockedOut, !error.message.hasSuffix(forgotPINPointer) else { return error }
        return KeyAuthError(
            error.code, error.message + forgotPINPointer, underlying: error.underlying, retryAfter: error.retryAfter)
    }

    /// The status after Control-C (SIGINT): 130, 128 plus the signal's number, as shells report
    /// a process that a signal ended.
    package static let interruptedStatus: Int32 = 128 + SIGINT

    /// The signals that stop a command cleanly: Control-C, `kill`, and the terminal going away.
    package static let stoppingSignals: [Int32] = [SIGINT, SIGTERM, SIGHUP]

    /// The exit status after `signal`: 128 plus its number (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
    package static func status(afterSignal signal: Int32) -> Int32 {
        128 + signal
    }

    /// Runs like ``run(_:io:)`` and turns SIGINT, SIGTERM and SIGHUP into a clean stop, for the
    /// binary.
    ///
    /// When a terminal prompt is waiting, its thread is blocked in `read(2)` where no
    /// cancellation reaches it: the terminal's settings (echo) are put back, its line ended, and
    /// the process exits at once. Otherwise the signal cancels the command's task: a wait for
    /// approval ends with one line saying the device stays pending, and the spinner's line is
    /// erased; a step that does not see the cancellation gets three seconds before the process
    /// exits regardless, and a second signal exits at once. Those exits are `_exit`: `exit` would
    /// run the process's exit handlers while the command's threads still hold their locks, and a
    /// handler that waits for one of them hangs the process that was asked to stop. Either way the status is
    /// ``status(afterSignal:)`` of the first signal.
    /// - Warning: this installs process-wide handlers for those signals (``StopSignals``);
    ///   embedding apps should call ``run(_:io:)`` and cancel its task themselves (and call
    ///   `TerminalSecretReader.restoreTerminalAfterInterrupt()` if they stop on a signal).
    public static func runHandlingInterrupts(_ arguments: [String], io: CommandIO) async -> Int32 {
        let task = Task { await run(arguments, io: io) }
        _ = StopSignals.install(stoppingSignals) { number in
            // Called once, with the first signal; a second one ends the process in the handler.
            let exitStatus = Self.status(afterSignal: number)
            // The exit in three seconds starts first: cancelling runs the task's cancellation
            // handlers on this thread, and one that waits for something stuck must not hold the
            // exit back too. A thread of its own: the cooperative pool and Dispatch's may be
            // what is stuck.
            let exitLater = DetachedThread.start(name: "keyauth-exit") {
                Thread.sleep(forTimeInterval: 3)
                _exit(exitStatus)
            }
            // Without a thread for the deadline, the process ends now rather than perhaps never.
            guard exitLater else { _exit(exitStatus) }
            task.cancel()
        }
        let status = await task.value
        return StopSignals.first.map(Self.status(afterSignal:)) ?? status
    }

    /// `keyauth: <message>` on one line, with control and format characters (C1 ones too)
    /// replaced by spaces.
    static func errorLine(for error: KeyAuthError) -> String {
        let message = String(
            String.UnicodeScalarView(error.message.unicodeScalars.map { OAuthError.isUnprintable($0) ? " " : $0 }))
        return "keyauth: " + message
    }

    /// Runs a parsed command; most end with success or an error, and `register --no-wait` with
    /// a device left waiting for approval ends with ``ExitCode/temporaryFailure`` after its
    /// output, which is no error.
    private static func execute(_ command: Command, context: CommandContext) async throws(KeyAuthError) -> ExitCode {
        switch command {
        case .help(let topic):
            context.io.printOutput(topic.map(HelpText.page(for:)) ?? HelpText.overview)
        case .version:
            context.io.printOutput("keyauth \(version)")
        case .register(let options):
            return try await RegisterCommand(context: context, options: options).run()
        case .login(let options):
            try await LoginCommand(context: context, options: options).run()
        case .token(let options):
            try await TokenCommand(context: context, options: options).run()
        case .proof(let options):
            try await ProofCommand(context: context, options: options).run()
        case .agent(let options):
            try await AgentCommand(context: context, options: options).run()
        case .logout(let options):
            try LogoutCommand(context: context, options: options).run()
        case .defaultAccount(let account):
            try DefaultAccountCommand(context: context, account: account).run()
        case .pinChange(let options):
            try await PINChangeCommand(context: context, options: options).run()
        case .status(let options):
            try StatusCommand(context: context, options: options).run()
        case .devices(let options):
            try await DevicesCommand(context: context, options: options).run()
        case .pubkey(let options):
            try PubkeyCommand(context: context, options: options).run()
        case .ssh(let options):
            try await SSHCommand(context: context, options: options).run()
        case .reset(let options):
            try await ResetCommand(context: context, options: options).run()
        case .requests(let options):
            try await RequestsCommand(context: context, options: options).run()
        case .answer(let options):
            try await AnswerCommand(context: context, options: options).run()
        case .recoveryCodes(let options):
            try await RecoveryCodesCommand(context: context, options: options).run()
        case .attest(let options):
            try await AttestCommand(context: context, options: options).run()
        }
        return .success
    }
}
