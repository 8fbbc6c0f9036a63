import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth agent --background`: the agent detached from the terminal, started as `ssh-agent`
/// starts, so that `eval "$(keyauth agent --background)"` in a shell's profile works.
///
/// The presence check stays in the command the user runs (the PIN is asked here, on this
/// terminal); the agent itself is a new `keyauth agent --serve-locked` process started with
/// `posix_spawn` (a Swift process has threads by now, and `fork` without `exec` would copy
/// only the calling one, with whatever locks the others held). It starts locked, in a session of
/// its own, with `/dev/null` as its standard streams, so that it holds neither the terminal nor
/// the pipe of the shell's `$(...)`; once it answers on the socket, this command unlocks it as it
/// would unlock any running agent (the PIN crosses the socket after the usual trust checks).
extension AgentCommand {
    /// Seconds the started agent has to answer on its socket.
    static let backgroundStartLimit: Duration = .seconds(10)

    /// Starts (or unlocks) the agent, then prints shell lines that export what finds it.
    func startInBackground(at path: String) async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let name = session.account.name
        try KeyAgentSocket.prepareDirectory(for: path)
        var started: pid_t?
        if try !runningAgent(at: path, for: name) {
            let child = try Self.spawnAgent(account: name, environment: context.io.environment)
            started = child
            try await waitUntilServing(at: path, account: name, child: child)
        }
        do {
            try await unlockRunning(session, at: path)
        } catch {
            // An agent started here that nobody unlocked would only be in the way.
            if started != nil { _ = try? KeyAgentSocket.exchange(KeyAgentRequest(op: "stop"), at: path) }
            throw error
        }
        // The agent that answers, which is not the one started here when another agent took the
        // socket first (that one then ended without serving).
        let pid: pid_t = try KeyAgentSocket.agentProcessID(at: path) ?? started ?? 0
        let expiry = try KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: path)?.expiresAt
        context.io.printError(
            "keyauth agent: holding the key of \(name) "
                + (expiry.map { "until \(Formatting.timestamp(Date(timeIntervalSince1970: $0))) " } ?? "")
                + "at \(path) (pid \(pid)); `keyauth agent --stop` ends it")
        context.io.printOutput(
            Self.shellLines(runtimeDirectory: context.io.environment["XDG_RUNTIME_DIR"] ?? "", pid: pid))
    }

    /// The lines for `eval`, in `ssh-agent`'s style. The agent's socket is found through
    /// `XDG_RUNTIME_DIR` (there is no variable of its own), so that is what they export, with the
    /// agent's process id as `KEYAUTH_AGENT_PID` for scripts that end it with `kill`, and the
    /// ssh-agent socket as `SSH_AUTH_SOCK` for `ssh` and `ssh-add`.
    static func shellLines(runtimeDirectory: String, pid: pid_t) -> String {
        let runtime = runtimeDirectory.hasSuffix("/") ? String(runtimeDirectory.dropLast()) : runtimeDirectory
        return """
            XDG_RUNTIME_DIR=\(shellQuoted(runtimeDirectory)); export XDG_RUNTIME_DIR;
            SSH_AUTH_SOCK=\(shellQuoted(runtime + "/keyauth/ssh-agent.sock")); export SSH_AUTH_SOCK;
            KEYAUTH_AGENT_PID=\(pid); export KEYAUTH_AGENT_PID;
            echo Agent pid \(pid);
            """
    }

    /// `text` in single quotes for a POSIX shell, a `'` in it written as `'\''`.
    static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// `--serve-locked`: the detached agent's side. It leaves the session of the terminal that
    /// started it (so that closing that terminal sends it no SIGHUP), then serves locked until
    /// the starting command unlocks it, and until `--stop` or SIGTERM.
    func serveLocked(at path: String) async throws(KeyAuthError) {
        // Not a process group leader (posix_spawn kept the parent's group), so this succeeds.
        _ = setsid()
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: false, waitForApproval: false)
        try KeyAgentSocket.prepareDirectory(for: path)
        guard try !runningAgent(at: path, for: session.account.name) else {
            throw KeyAuthError(.invalidArgument, "an agent already runs at \(path)")
        }
        try await listenAndServe(try makeServer(session, at: path), for: session, at: path) {}
    }

    /// Waits until the agent started as `child` answers at `path` for `account`.
    ///
    /// - Throws: `.agentStartFailed` when it ends first or does not answer in
    ///   ``backgroundStartLimit``.
    private func waitUntilServing(at path: String, account: String, child: pid_t) async throws(KeyAuthError) {
        let deadline = ContinuousClock.now + Self.backgroundStartLimit
        while ContinuousClock.now < deadline {
            if try runningAgent(at: path, for: account) { return }
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child {
                // Another agent started at the same moment holds the lock, and answers a moment
                // later: that one serves.
                for _ in 0..<20 {
                    try? await Task.sleep(for: .milliseconds(50))
                    if try runningAgent(at: path, for: account) { return }
                }
                throw KeyAuthError(
                    .agentStartFailed,
                    "the background agent ended before it served (wait status \(status)); "
                        + "run `keyauth agent` in the foreground to see why")
            }
            do {
                try await Task.sleep(for: .milliseconds(50))
            } catch {
                kill(child, SIGTERM)
                throw KeyAuthError(.cancelled, "stopped before the agent started")
            }
        }
        kill(child, SIGTERM)
        throw KeyAuthError(
            .agentStartFailed, "the background agent did not answer at \(path) within 10 seconds; it was stopped")
    }

    /// Starts `keyauth agent --serve-locked --account NAME` from this process's own executable,
    /// with `environment`, `/dev/null` as standard streams and no other descriptor of ours.
    ///
    /// - Returns: its process id.
    /// - Throws: `.agentStartFailed` with the system's reason.
    private static func spawnAgent(account: String, environment: [String: String]) throws(KeyAuthError) -> pid_t {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { throw startFailure("cannot find the keyauth executable (/proc/self/exe)") }
        let executable = String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        markDescriptorsCloseOnExec()

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor in Int32(0)...2 {
            posix_spawn_file_actions_addopen(
                &actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A prompt's thread blocks signals; the agent starts with none blocked, and with the
        // stop signals at their defaults until it installs its own handlers.
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        for number in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&stopSignals, number) }
        posix_spawnattr_setsigdefault(&attributes, &stopSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        // One argument: an account may be named `--x`, which as a separate word reads as an option.
        let arguments = [executable, "agent", "--serve-locked", "--account=\(account)"]
        let variables = environment.map { "\($0.key)=\($0.value)" }
        var argv = arguments.map { strdup($0) } + [nil]
        var envp = variables.map { strdup($0) } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, &argv, &envp)
        guard result == 0 else {
            throw startFailure("cannot start \(executable): \(String(cString: strerror(result)))")
        }
        return pid
    }

    /// Sets close-on-exec on every descriptor above the standard streams: whatever this process
    /// opened without it (an account file, a pipe) must not live on in the agent for hours.
    private static func markDescriptorsCloseOnExec() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for descriptor in names.compactMap({ Int32($0) }) where descriptor > 2 {
            let flags = fcntl(descriptor, F_GETFD)
            if flags >= 0 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
        }
    }

    private static func startFailure(_ message: String) -> KeyAuthError {
        KeyAuthError(.agentStartFailed, message)
    }
}

extension KeyAuthError.Code {
    /// `keyauth agent --background` could not start the detached agent; `keyauth` exits 1.
    package static let agentStartFailed = KeyAuthError.Code(rawValue: "agent_start_failed")
}
