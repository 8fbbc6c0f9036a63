import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// `keyauth agent` driven as a person would: started with the PIN once, then `login` and `token`
/// from a script with no terminal and no `--pin-stdin`.
@Suite("keyauth agent", .serialized, .timeLimit(.minutes(10)))
struct AgentTests {
    static let pin = "246813"

    /// A running `keyauth agent` child of the test, with its own `XDG_RUNTIME_DIR`.
    final class RunningAgent {
        let process: ChildProcess
        let runtime = TemporaryDirectory("keyauth-run")
        /// The PIN it reads and what it writes on standard error, outside its runtime directory.
        private let scratch = TemporaryDirectory("keyauth-agent")

        var socketPath: String { runtime.path + "/keyauth/agent.sock" }
        var environment: [String: String] { ["XDG_RUNTIME_DIR": runtime.path] }

        init(
            _ machine: Machine, extra: [String] = [], pin: String = AgentTests.pin,
            extraEnvironment: [String: String] = [:]
        ) throws {
            try Data((pin + "\n").utf8).write(to: URL(fileURLWithPath: scratch.path + "/pin"))
            let environment = machine.environment.merging(["XDG_RUNTIME_DIR": runtime.path]) { $1 }
                .merging(extraEnvironment) { $1 }
            // A preloaded libfaketime leaves a posix_spawned Swift program without its arguments;
            // started through a program that execs it, it has them.
            let (executable, arguments) =
                extraEnvironment["LD_PRELOAD"] == nil
                ? (Binaries.keyauth, ["agent", "--pin-stdin"] + extra)
                : ("/usr/bin/env", [Binaries.keyauth, "agent", "--pin-stdin"] + extra)
            process = try ChildProcess(
                executable, arguments, environment: environment,
                standardInput: .file(scratch.path + "/pin"), standardError: .file(scratch.path + "/stderr"))
            // Started once the socket answers; the bound only stops a broken agent hanging the test.
            for _ in 0..<300 where status() == nil && process.isRunning { Thread.sleep(forTimeInterval: 0.1) }
        }

        /// The agent's answer to `status`, nil when nothing answers.
        func status() -> KeyAgentResponse? {
            try? KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: socketPath)
        }

        /// What the agent wrote on standard error.
        func standardError() -> String {
            (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
        }

        /// Ends the agent (SIGTERM) if it still runs, and removes its runtime directory.
        func stop() {
            process.stop()
            runtime.remove()
        }

        deinit {
            scratch.remove()
        }
    }

    /// A machine registered with a PIN-protected key file, with no stored token.
    static func registeredMachine(_ server: KeyAuthServerProcess) throws -> Machine {
        let machine = Machine()
        #expect(try machine.register(server, user: "alice", pin: pin).status == 0)
        #expect(try machine.run(["logout"]).status == 0)
        return machine
    }

    /// Runs `body` with a registered machine and an agent that holds its key; ends both after.
    static func withUnlockedAgent(
        extra: [String] = [], _ body: (Machine, RunningAgent) throws -> Void
    ) throws {
        try withServer { server in
            let machine = try registeredMachine(server)
            defer { machine.home.remove() }
            let agent = try RunningAgent(machine, extra: extra)
            defer { agent.stop() }
            #expect(agent.status()?.locked == false)
            try body(machine, agent)
        }
    }

    @Test("login and token sign through the agent without a terminal; locked or stopped, they fail with 77")
    func signsThroughTheAgent() throws {
        try withServer { server in
            let machine = try Self.registeredMachine(server)
            defer { machine.home.remove() }
            // Without the agent, a script cannot log in: the PIN cannot be asked.
            let before = try machine.run(["login"], extraEnvironment: ["XDG_RUNTIME_DIR": "/nonexistent"])
            #expect(before.status == 77)

            let agent = try RunningAgent(machine)
            defer { agent.stop() }
            let status = try #require(agent.status())
            #expect(status.locked == false)
            #expect(status.account == (try machine.accounts.resolve(nil)))
            let socketInfo = try FileManager.default.attributesOfItem(atPath: agent.socketPath)
            #expect((socketInfo[.posixPermissions] as? Int) == 0o600)
            let directoryInfo = try FileManager.default.attributesOfItem(atPath: agent.runtime.path + "/keyauth")
            #expect((directoryInfo[.posixPermissions] as? Int) == 0o700)

            let login = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(login.status == 0, "\(login.standardError)")
            #expect(try machine.run(["logout"]).status == 0)
            let token = try machine.run(["token"], extraEnvironment: agent.environment)
            #expect(token.status == 0, "\(token.standardError)")
            #expect(token.standardOutput.split(separator: ".").count == 3)
            // A DPoP proof needs the private key: the agent signs it too.
            let proof = try machine.run(
                ["proof", "GET", server.url + "/api/me"], extraEnvironment: agent.environment)
            #expect(proof.status == 0, "\(proof.standardError)")
            let noAgentProof = try machine.run(
                ["proof", "GET", server.url + "/api/me"], extraEnvironment: ["XDG_RUNTIME_DIR": "/nonexistent"])
            #expect(noAgentProof.status == 77)

            // Locked: the agent runs but holds nothing, and login falls back to asking for the PIN.
            #expect(try machine.run(["agent", "--lock"], extraEnvironment: agent.environment).status == 0)
            #expect(agent.status()?.locked == true)
            let locked = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(locked.status == 77)
            #expect(locked.standardError.contains("no terminal to ask for the PIN"))

            // `keyauth agent` again unlocks the running agent in place.
            let unlock = try machine.run(
                ["agent", "--pin-stdin"], standardInput: Self.pin + "\n", extraEnvironment: agent.environment)
            #expect(unlock.status == 0, "\(unlock.standardError)")
            #expect(try machine.run(["login"], extraEnvironment: agent.environment).status == 0)

            let stop = try machine.run(["agent", "--stop"], extraEnvironment: agent.environment)
            #expect(stop.status == 0, "\(stop.standardError)")
            #expect(agent.process.wait(timeout: 30) == .exited(0))
            #expect(!FileManager.default.fileExists(atPath: agent.socketPath))
            let stopped = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(stopped.status == 77)
        }
    }

    @Test("a peer of another uid that reaches the socket is refused and gets no signature")
    func refusesOtherUIDs() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser") else { return }
        try Self.withUnlockedAgent { machine, agent in
            // Loosen the file-system guard, as a mistake or a capability would, to reach SO_PEERCRED.
            chmod(agent.runtime.path, 0o711)
            chmod(agent.runtime.path + "/keyauth", 0o711)
            chmod(agent.socketPath, 0o666)
            let script = """
                import json, socket, struct, sys
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1])
                body = json.dumps({"op": "sign", "input": "ZXlKaGJHY2lPaUpTVXpJMU5pSjkuZTMw"}).encode()
                data = b""
                try:
                    s.sendall(struct.pack(">I", len(body)) + body)
                    while True:
                        chunk = s.recv(4096)
                        if not chunk: break
                        data += chunk
                except ConnectionError:
                    pass
                print("signature" if b'"signature"' in data else "none")
                """
            let own = try runProcess("/usr/bin/python3", ["-c", script, agent.socketPath], environment: [:])
            #expect(own.standardOutput.contains("signature"), "\(own.standardError)")
            let other = try runProcess(
                "/usr/sbin/runuser", ["-u", "nobody", "--", "/usr/bin/python3", "-c", script, agent.socketPath],
                environment: [:])
            #expect(other.standardOutput.contains("none"), "\(other.standardError)")
            #expect(!other.standardOutput.contains("signature"))
            agent.stop()
            #expect(agent.standardError().contains("refused a connection from uid 65534"))
        }
    }

    @Test("SIGTERM ends the agent and removes its socket; a wrong PIN at start leaves no agent")
    func signalsAndWrongPIN() throws {
        try Self.withUnlockedAgent { machine, agent in
            // The agent's handler ends it with 128 + SIGTERM; the signal itself does not.
            #expect(agent.process.stop() == .exited(128 + SIGTERM))
            #expect(!FileManager.default.fileExists(atPath: agent.socketPath))

            let wrong = try machine.run(
                ["agent", "--pin-stdin"], standardInput: "000000\n", extraEnvironment: agent.environment)
            #expect(wrong.status == 77)
            #expect(wrong.standardError.contains("wrong PIN"))
            #expect(!FileManager.default.fileExists(atPath: agent.socketPath))
        }
    }

    static let tpmPIN = "2468"

    /// A machine registered with a TPM key (PIN ``tpmPIN``) on a software TPM, and an agent
    /// unlocked for it.
    static func withTPMAgent(_ body: (Machine, RunningAgent) throws -> Void) throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try withServer { server in
            let machine = Machine(tpm: tpm)
            defer { machine.home.remove() }
            let registered = try machine.register(server, user: "alice", extra: ["--key-store", "tpm"], pin: tpmPIN)
            try #require(registered.status == 0, "\(registered.standardError)")
            #expect(try machine.run(["logout"]).status == 0)
            let agent = try RunningAgent(machine, pin: tpmPIN)
            defer { agent.stop() }
            #expect(agent.status()?.locked == false)
            try body(machine, agent)
        }
    }

    @Test("a TPM key: the agent holds its PIN and the TPM signs a login that asks nothing")
    func tpmKey() throws {
        try Self.withTPMAgent { machine, agent in
            let login = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(login.status == 0, "\(login.standardError)")
            #expect(try machine.run(["agent", "--lock"], extraEnvironment: agent.environment).status == 0)
            #expect(try machine.run(["login"], extraEnvironment: agent.environment).status == 77)
        }
    }

    @Test("after `pin change` of a TPM key, the agent's first refused signature locks it: no more TPM tries")
    func tpmPINChanged() throws {
        try Self.withTPMAgent { machine, agent in
            let change = try machine.run(["pin", "change", "--pin-stdin"], standardInput: "\(Self.tpmPIN)\n97531\n")
            try #require(change.status == 0, "\(change.standardError)")
            let refused = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(refused.status != 0)
            #expect(refused.standardError.contains("no longer opens the TPM key"), "\(refused.standardError)")
            // Locked, the agent asks the TPM nothing more; the new PIN still logs in.
            #expect(agent.status()?.locked == true)
            let login = try machine.run(["login", "--pin-stdin"], standardInput: "97531\n")
            #expect(login.status == 0, "\(login.standardError)")
        }
    }

    @Test("while another agent holds the agent lock, an agent does not start, and touches no socket")
    func lockHeld() throws {
        try withServer { server in
            let machine = try Self.registeredMachine(server)
            defer { machine.home.remove() }
            let runtime = TemporaryDirectory("keyauth-run")
            defer { runtime.remove() }
            try #require(mkdir(runtime.path + "/keyauth", 0o700) == 0)
            // What an agent holds from before it binds its sockets until it has removed them.
            let lock = open(runtime.path + "/keyauth/agent.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(lock >= 0 && flock(lock, LOCK_EX) == 0)
            defer { close(lock) }
            let refused = try machine.run(
                ["agent", "--pin-stdin"], standardInput: Self.pin + "\n",
                extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path], timeout: 20)
            #expect(refused.status != 0)
            #expect(
                refused.standardError.contains("another keyauth agent is starting or running"),
                "\(refused.standardError)")
            #expect(access(runtime.path + "/keyauth/agent.sock", F_OK) != 0)
        }
    }

    @Test("after `keyauth reset` the agent signs no more, and a new registration does not reopen it")
    func resetLocksTheAgent() throws {
        try withServer { server in
            let machine = try Self.registeredMachine(server)
            defer { machine.home.remove() }
            let agent = try RunningAgent(machine)
            defer { agent.stop() }
            let accountName = try machine.accounts.resolve(nil)
            let fingerprint = try machine.accounts.keyPairStore(for: accountName).loadPublicKey().fingerprint
            let input = Base64URL.encode(
                AgentSigningPolicyTests.input(
                    .object(["alg": .string("RS256"), "typ": .string("JWT")]),
                    .object(["sub": .string(fingerprint), "amr": .array([.string("swk")])])))
            let before = try #require(
                try KeyAgentSocket.exchange(KeyAgentRequest(op: "sign", input: input), at: agent.socketPath))
            #expect(before.ok, "\(before.message ?? "")")
            // The device revoked on the server too: its user may register anew.
            let reset = try machine.run(["reset"], extraEnvironment: agent.environment)
            #expect(reset.status == 0, "\(reset.standardError)")
            let after = try #require(
                try KeyAgentSocket.exchange(KeyAgentRequest(op: "sign", input: input), at: agent.socketPath))
            #expect(!after.ok && after.error == "key_not_found", "\(after.message ?? "")")
            #expect(agent.status()?.locked == true)
            // The same account name registered again (a first device of another user: alice's
            // next would need an enrollment code), with the same PIN: the agent neither signs with
            // the new key under its old identity nor opens it.
            let registered = try machine.register(
                server, user: "bob", extra: ["--account", accountName], pin: Self.pin)
            #expect(registered.status == 0, "\(registered.standardError)")
            let unlock = try #require(
                try KeyAgentSocket.exchange(
                    KeyAgentRequest(op: "unlock", pinFrame: false, timeout: 60), at: agent.socketPath))
            #expect(!unlock.ok && unlock.error == "key_not_found", "\(unlock.message ?? "")")
            let again = try #require(
                try KeyAgentSocket.exchange(KeyAgentRequest(op: "sign", input: input), at: agent.socketPath))
            #expect(!again.ok, "\(again.message ?? "")")
            #expect(agent.status()?.locked == true)
        }
    }

    @Test(
        "a wall clock set back does not hold the key past --timeout",
        .enabled(if: FileManager.default.fileExists(atPath: AgentTests.libfaketime)))
    func timeoutIgnoresTheWallClock() throws {
        try withServer { server in
            let machine = try Self.registeredMachine(server)
            defer { machine.home.remove() }
            let offset = machine.home.path + "/clock-offset"
            try "+0s\n".write(toFile: offset, atomically: true, encoding: .utf8)
            let agent = try RunningAgent(
                machine, extra: ["--timeout", "3s"],
                extraEnvironment: [
                    "LD_PRELOAD": Self.libfaketime, "FAKETIME_TIMESTAMP_FILE": offset, "FAKETIME_NO_CACHE": "1",
                    "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                ])
            defer { agent.stop() }
            #expect(agent.status()?.locked == false, "\(agent.standardError())")
            // The wall clock steps back a day (NTP after a hardware clock in local time).
            try "-86400s\n".write(toFile: offset, atomically: true, encoding: .utf8)
            for _ in 0..<100 where agent.status()?.locked == false { Thread.sleep(forTimeInterval: 0.1) }
            #expect(agent.status()?.locked == true)
        }
    }

    /// libfaketime as Debian's `faketime` package installs it.
    static let libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

    @Test("when --timeout passes, the agent clears the key and login asks for the PIN again")
    func timeoutClears() throws {
        try Self.withUnlockedAgent(extra: ["--timeout", "2s"]) { machine, agent in
            for _ in 0..<300 where agent.status()?.locked == false { Thread.sleep(forTimeInterval: 0.1) }
            #expect(agent.status()?.locked == true)
            let login = try machine.run(["login"], extraEnvironment: agent.environment)
            #expect(login.status == 77)
        }
    }
}
