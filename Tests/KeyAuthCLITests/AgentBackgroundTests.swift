import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth agent --background` as a shell profile runs it, `eval "$(...)"` in a real shell, and
/// the systemd user unit that starts the same detached agent.
@Suite("keyauth agent --background and its user unit", .serialized, .timeLimit(.minutes(5)))
struct AgentBackgroundTests {
    /// The detached agent's socket under `runtime`.
    static func socket(_ runtime: TemporaryDirectory) -> String {
        runtime.path + "/keyauth/agent.sock"
    }

    /// Waits up to 30 seconds for the socket to go, as it does once the agent ended.
    static func socketGone(_ path: String) -> Bool {
        for _ in 0..<300 where FileManager.default.fileExists(atPath: path) { usleep(100_000) }
        return !FileManager.default.fileExists(atPath: path)
    }

    /// Runs `body` with a machine registered with a PIN and an empty runtime directory of its
    /// own; removes both after.
    static func withMachine(_ body: (Machine, TemporaryDirectory) throws -> Void) throws {
        try withServer { server in
            let machine = try AgentTests.registeredMachine(server)
            defer { machine.home.remove() }
            let runtime = TemporaryDirectory("keyauth-run")
            defer { runtime.remove() }
            try body(machine, runtime)
        }
    }

    @Test(
        "eval \"$(keyauth agent --background)\" returns with the agent detached, exports its pid, and the agent signs until --stop"
    )
    func evalInAShell() throws {
        try Self.withMachine { machine, runtime in
            let environment = machine.environment.merging(["XDG_RUNTIME_DIR": runtime.path]) { $1 }
            // The shell's $(...) ends only when every writer of its pipe has: an agent that kept
            // standard output would hold it until the time limit.
            let shell = try runProcess(
                "/bin/sh",
                [
                    "-c",
                    "eval \"$(\"$0\" agent --background --pin-stdin)\" && echo \"pid=$KEYAUTH_AGENT_PID run=$XDG_RUNTIME_DIR\"",
                    Binaries.keyauth,
                ], environment: environment, standardInput: AgentTests.pin + "\n", timeout: 60)
            let lines = shell.standardOutput.split(separator: "\n").map(String.init)
            let pid = try #require(
                lines.last.flatMap { $0.split(separator: " ").first }.flatMap { Int32($0.dropFirst("pid=".count)) },
                "\(shell.standardOutput) \(shell.standardError)")
            defer {
                _ = try? machine.run(["agent", "--stop"], extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
                kill(pid, SIGTERM)
            }
            #expect(shell.status == 0, "\(shell.standardError)")
            #expect(lines == ["Agent pid \(pid)", "pid=\(pid) run=\(runtime.path)"])
            #expect(shell.standardError.contains("keyauth agent: holding the key of alice@"))
            #expect(shell.standardError.contains("(pid \(pid))"))

            // Another process than the command, in a session of its own, holding the key.
            #expect(getsid(pid) == pid)
            let path = Self.socket(runtime)
            #expect(try KeyAgentSocket.agentProcessID(at: path) == pid)
            #expect(try KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: path)?.locked == false)
            let token = try machine.run(["token"], extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(token.status == 0, "\(token.standardError)")

            // Run again, it unlocks the agent that runs and names it; no second agent starts.
            let again = try machine.run(
                ["agent", "--background", "--pin-stdin"], standardInput: AgentTests.pin + "\n",
                extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(again.status == 0, "\(again.standardError)")
            #expect(
                again.standardOutput
                    == "XDG_RUNTIME_DIR='\(runtime.path)'; export XDG_RUNTIME_DIR;\n"
                    + "SSH_AUTH_SOCK='\(runtime.path)/keyauth/ssh-agent.sock'; export SSH_AUTH_SOCK;\n"
                    + "KEYAUTH_AGENT_PID=\(pid); export KEYAUTH_AGENT_PID;\necho Agent pid \(pid);\n")

            let stopped = try machine.run(["agent", "--stop"], extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(stopped.status == 0, "\(stopped.standardError)")
            #expect(Self.socketGone(path))
        }
    }

    @Test("a wrong PIN at --background exits 77 and stops the agent it started")
    func wrongPIN() throws {
        try Self.withMachine { machine, runtime in
            let refused = try machine.run(
                ["agent", "--background", "--pin-stdin"], standardInput: "135792\n",
                extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(refused.status == 77, "\(refused.standardError)")
            #expect(refused.standardOutput.isEmpty)
            #expect(Self.socketGone(Self.socket(runtime)))
        }
    }

    @Test("an account named like an option (--x) starts in the background as any other")
    func optionLikeAccount() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let registered = try machine.register(server, user: "alice", extra: ["--account=--x"], pin: AgentTests.pin)
            try #require(registered.status == 0, "\(registered.standardError)")
            let runtime = TemporaryDirectory("keyauth-run")
            defer { runtime.remove() }
            let started = try machine.run(
                ["agent", "--background", "--pin-stdin", "--account=--x"], standardInput: AgentTests.pin + "\n",
                extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(started.status == 0, "\(started.standardError)")
            let path = Self.socket(runtime)
            #expect(try KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: path)?.account == "--x")
            let stopped = try machine.run(["agent", "--stop"], extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(stopped.status == 0, "\(stopped.standardError)")
            #expect(Self.socketGone(path))
        }
    }

    @Test("the --background lines quote the runtime directory for the shell")
    func shellQuoting() {
        #expect(
            AgentCommand.shellLines(runtimeDirectory: "/run/user/1000", pid: 42)
                == "XDG_RUNTIME_DIR='/run/user/1000'; export XDG_RUNTIME_DIR;\n"
                + "SSH_AUTH_SOCK='/run/user/1000/keyauth/ssh-agent.sock'; export SSH_AUTH_SOCK;\n"
                + "KEYAUTH_AGENT_PID=42; export KEYAUTH_AGENT_PID;\necho Agent pid 42;")
        #expect(AgentCommand.shellQuoted("/tmp/it's here") == "'/tmp/it'\\''s here'")
    }

    @Test("the systemd user unit keyauth-agent.service passes systemd-analyze verify --user", .timeLimit(.minutes(10)))
    func userUnit() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"))
        let root = Vectors.packageRoot.path
        let checked = try runProcess(
            "/bin/bash",
            [
                root + "/packaging/tests/user-unit.sh", root + "/packaging/systemd/keyauth-agent.service",
                Binaries.keyauth,
            ], environment: ["PATH": "/usr/bin:/bin"], timeout: 90)
        #expect(checked.status == 0, "\(checked.standardError)")
        #expect(checked.standardOutput.contains("passes systemd-analyze verify --user"))
    }
}
