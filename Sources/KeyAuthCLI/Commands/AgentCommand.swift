import CKeyAuthProcess
import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth agent`: unlocks one account's key once and holds it, like `ssh-agent`, so that
/// `login`, `token` and `proof` sign without asking for the PIN until the timeout.
///
/// It runs in the foreground (start it with `&`), detached with `--background`
/// (`AgentCommand+Background.swift`), or as the systemd user service that runs `--serve-locked`;
/// `--lock` and `--stop` talk to the running one. When an agent already runs for the account, `keyauth agent`
/// checks presence here and has the running agent open the key (the PIN crosses the socket,
/// which only the user's own processes may use, and only once `SO_PEERCRED` shows the agent runs
/// as the user), so that a locked agent is unlocked in place.
struct AgentCommand {
    let context: CommandContext
    let options: AgentOptions

    func run() async throws(KeyAuthError) {
        if case .start = options.action { Self.keepMemoryToItself() }
        let path = try KeyAgentSocket.path(environment: context.io.environment)
        switch options.action {
        case .lock:
            try sendControl("lock", to: path, done: "locked: it holds no key until `keyauth agent` unlocks it")
        case .stop:
            try sendControl("stop", to: path, done: "stopped")
            // The agent removes its socket on the way out: wait for that, so callers see it gone.
            for _ in 0..<50 where access(path, F_OK) == 0 { try? await Task.sleep(for: .milliseconds(100)) }
        case .start where options.servesLocked:
            try await serveLocked(at: path)
        case .start where options.background:
            try await startInBackground(at: path)
        case .start:
            try await start(at: path)
        }
    }

    private func sendControl(_ op: String, to path: String, done: String) throws(KeyAuthError) {
        guard let response = try KeyAgentSocket.exchange(KeyAgentRequest(op: op), at: path) else {
            context.io.printOutput("keyauth agent: no agent answers at \(path)")
            return
        }
        guard response.ok else { throw Self.error(from: response) }
        context.io.printOutput("keyauth agent: \(done)")
    }

    private func start(at path: String) async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let name = session.account.name
        // Before asking anything: the directory is made 0700, or refused when it is not ours.
        try KeyAgentSocket.prepareDirectory(for: path)
        if try runningAgent(at: path, for: name) {
            try await unlockRunning(session, at: path)
            context.io.printOutput("keyauth agent: unlocked the running agent for \(name)")
            return
        }
        let server = try makeServer(session, at: path)
        let timeout = options.timeout
        let open = { (pin: SecretBytes?) throws(KeyAuthError) in try server.unlock(pin: pin, timeout: timeout) }
        try await Self.checkPresence(session, reason: Self.unlockReason(name), open)
        let output = context.io
        try await listenAndServe(server, for: session, at: path) {
            output.printOutput(
                "keyauth agent: holding the key of \(name) until "
                    + "\(server.expiresAt.map(Formatting.timestamp) ?? "now") at \(path); "
                    + "`keyauth agent --lock` clears it, `keyauth agent --stop` ends the agent")
        }
    }

    /// Keeps the unlocked key (or a TPM key's PIN) in this process: no core file, and, as
    /// `ssh-agent` does, no other process of the user may attach a debugger or read the memory
    /// through `/proc/PID/mem`. Without it, anything running as the user (where the kernel's
    /// `ptrace_scope` allows, as Debian's default does) could copy the key out of an agent that
    /// holds it for hours, and then sign what the agent refuses to (an assertion stating `pin`).
    /// Done first, before a PIN is read or a key opened.
    static func keepMemoryToItself() {
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        _ = ckeyauth_forbid_tracing()
    }

    /// What the presence check says it is for.
    static func unlockReason(_ account: String) -> String {
        "Unlock the device key of \(account) for keyauth agent"
    }

    /// Whether an agent for `account` answers at `path`.
    ///
    /// - Throws: `.invalidArgument` when the one that answers serves another account (one agent
    ///   per user); the socket's trust checks' errors.
    func runningAgent(at path: String, for account: String) throws(KeyAuthError) -> Bool {
        guard let status = try KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: path) else { return false }
        guard status.account == account else {
            throw KeyAuthError(
                .invalidArgument,
                "an agent for account \(status.account ?? "?") already runs at \(path); "
                    + "stop it with `keyauth agent --stop` first")
        }
        return true
    }

    /// Checks presence here and has the agent running at `path` open the key.
    func unlockRunning(_ session: AccountSession, at path: String) async throws(KeyAuthError) {
        let timeout = options.timeout
        let open = { (pin: SecretBytes?) throws(KeyAuthError) in
            try Self.unlockRunning(at: path, pin: pin, timeout: timeout)
        }
        try await Self.checkPresence(session, reason: Self.unlockReason(session.account.name), open)
    }

    /// An agent for the session's account, locked until something unlocks it.
    func makeServer(_ session: AccountSession, at path: String) throws(KeyAuthError) -> KeyAgentServer {
        let errorOutput = context.io
        return try KeyAgentServer(
            account: session.account.name, keyID: try session.keys.loadPublicKey().fingerprint,
            store: session.keys, socketPath: path, errorOutput: { errorOutput.printError($0) })
    }

    /// Listens at `path`, calls `listening`, and serves until stopped (`--stop`, a signal); beside
    /// the loop, an ``SSHCertificateRenewer`` keeps the session's SSH certificate fresh.
    func listenAndServe(
        _ server: KeyAgentServer, for session: AccountSession, at path: String, listening: () -> Void
    ) async throws(KeyAuthError) {
        // Held until the sockets are gone again (the server removes them as it ends).
        let lock: AgentLock
        do throws(KeyAuthError) {
            lock = try AgentLock(besideSocket: path)
        } catch {
            server.clear()
            throw error
        }
        defer { withExtendedLifetime(lock) {} }
        unlink(path)
        unlink(server.sshSocketPath)
        let listener: Int32
        let sshListener: Int32
        do throws(KeyAuthError) {
            listener = try KeyAgentSocket.listen(at: path)
        } catch {
            server.clear()
            throw error
        }
        do throws(KeyAuthError) {
            sshListener = try KeyAgentSocket.listen(at: server.sshSocketPath)
        } catch {
            server.clear()
            close(listener)
            unlink(path)
            throw error
        }
        listening()
        let errorOutput = context.io
        let renewal = Task { [context] in
            do throws(KeyAuthError) {
                let renewing = try SSHCertificateRenewer.session(for: session.account.name, context: context)
                await SSHCertificateRenewer.forAgent(session: renewing, server: server) { errorOutput.printError($0) }
                    .run()
            } catch {
                errorOutput.printError("keyauth agent: cannot renew the ssh certificate: \(error.message)")
            }
        }
        defer { renewal.cancel() }
        await withTaskCancellationHandler {
            await BlockingWork.run(threadName: "keyauth-agent") { server.serve(listener, sshListener: sshListener) }
        } onCancel: {
            server.requestStop()
        }
    }

    /// Checks presence and has the agent open the key through `open`.
    ///
    /// Whatever `open` reaches (this process's server or a running agent) counts the PIN itself,
    /// a TPM key's in the TPM and a key file's in its attempts file
    /// (``KeyAgentServer/unlock(pin:timeout:)``), so the PIN is asked for here as for a key
    /// whose hardware counts: a second count here would make one wrong PIN two. A PIN account
    /// first sees an existing delay, before it types anything.
    static func checkPresence(
        _ session: AccountSession, reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Void
    ) async throws(KeyAuthError) {
        let presence = session.authenticator.presence
        if session.keys.storedKind != .tpm, let pins = (presence as? StatedPresence)?.base as? PINPresence {
            try PINAttemptCounter(attemptsFile: session.keys.pinAttemptsPath).checkLockout()
            // Asked again after a wrong PIN on a terminal, as a login asks.
            try await pins.unlockCheckedHardwareKey(reason: reason, open)
        } else {
            try await presence.unlockHardwareKey(reason: reason, open)
        }
    }

    /// Has the running agent open the key with `pin`.
    static func unlockRunning(at path: String, pin: SecretBytes?, timeout: TimeInterval) throws(KeyAuthError) {
        let request = KeyAgentRequest(op: "unlock", timeout: timeout)
        guard let response = try KeyAgentSocket.exchange(request, at: path, pin: pin) else {
            throw KeyAuthError(.presenceUnavailable, "the agent at \(path) stopped answering")
        }
        guard response.ok else { throw error(from: response) }
    }

    static func error(from response: KeyAgentResponse) -> KeyAuthError {
        KeyAuthError(
            KeyAuthError.Code(rawValue: response.error ?? KeyAuthError.Code.presenceUnavailable.rawValue),
            response.message ?? "the agent refused", retryAfter: response.retryAfter)
    }
}
