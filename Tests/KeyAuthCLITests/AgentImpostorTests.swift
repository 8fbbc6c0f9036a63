import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The client side of `keyauth agent`: every command that talks to an agent first makes sure it
/// is the user's own (its directory, its socket file, and `SO_PEERCRED` of the process
/// listening), and otherwise refuses with exit status 65 before sending a byte, so that a rogue
/// listener never learns a PIN or a signing request.
@Suite("keyauth refuses an agent that is not the user's own", .serialized, .timeLimit(.minutes(10)))
struct AgentImpostorTests {
    /// `nobody`, the other user the impostors run as.
    static let otherUID = 65534

    /// A listener on an agent's socket path that answers every request as an unlocked agent for
    /// `account` would, and records every byte it receives: what a rogue agent learns.
    final class ImpostorAgent {
        /// Who listens, and who owns what.
        enum Setup: String {
            /// Another user makes the directory and the socket in a runtime directory it can write.
            case otherUser = "own"
            /// The socket file is the user's, but the process listening runs as another user.
            case otherPeer = "listen"
            /// The test's own uid listens and owns the socket (file-system checks alone refuse).
            case sameUser = "root"
            /// The test's own uid listens, but the socket file belongs to another user.
            case otherSocketOwner = "chown"
        }

        private static let script = """
            import json, os, socket, struct, sys
            setup, path, record, account = sys.argv[1:5]
            log = os.open(record, os.O_WRONLY | os.O_APPEND)
            def drop():
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
            if setup == "own":
                drop()
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            if setup == "listen":
                drop()
            server.listen(8)
            # Ends by itself should the test not stop it.
            server.settimeout(150)
            if setup == "chown":
                os.chown(path, 65534, 65534)
            answer = json.dumps({"ok": True, "account": account, "locked": False,
                                 "expiresAt": 4102444800, "signature": "AAAA"}).encode()
            sys.stderr.write("listening\\n")
            sys.stderr.flush()
            while True:
                connection, _ = server.accept()
                connection.settimeout(2)
                received = b""
                try:
                    while len(received) < 4 or len(received) < 4 + struct.unpack(">I", received[:4])[0]:
                        chunk = connection.recv(65536)
                        if not chunk:
                            break
                        received += chunk
                        os.write(log, chunk)
                    connection.sendall(struct.pack(">I", len(answer)) + answer)
                except OSError:
                    pass
                connection.close()
            """

        private let process: RunningProcess
        private let record: String

        /// Starts listening at `socketPath`, and returns once it does.
        init(at socketPath: String, _ setup: Setup, account: String, scratch: TemporaryDirectory) throws {
            record = scratch.path + "/received-\(UUID().uuidString)"
            _ = FileManager.default.createFile(atPath: record, contents: nil)
            process = try RunningProcess(
                "/usr/bin/python3", ["-c", Self.script, setup.rawValue, socketPath, record, account], environment: [:])
            guard process.waitForError(containing: "listening", timeout: 30) else {
                throw TestFailure("the impostor agent did not start: \(process.standardError)")
            }
        }

        /// Every byte a client sent it.
        var received: Data { FileManager.default.contents(atPath: record) ?? Data() }

        /// Kills it: a child of `Foundation.Process` may start with SIGTERM blocked.
        func stop() {
            process.signal(SIGKILL)
            _ = process.wait(timeout: 10)
        }
    }

    /// Every command that talks to an agent: the one that sends the PIN (`keyauth agent` while
    /// an agent for the account answers), the ones that sign through it, and the controls.
    static func agentCommands(serverURL: String) -> [(arguments: [String], input: String)] {
        [
            (["agent", "--pin-stdin"], AgentTests.pin + "\n"), (["login", "--pin-stdin"], AgentTests.pin + "\n"),
            (["token"], ""), (["proof", "GET", serverURL + "/api/me", "--pin-stdin"], AgentTests.pin + "\n"),
            (["agent", "--lock"], ""), (["agent", "--stop"], ""),
        ]
    }

    /// Runs every agent command of `machine` against an impostor set up by `arrange` in a fresh
    /// runtime directory, and expects each to exit 65 naming `problem` with nothing sent.
    static func expectRefused(
        _ machine: Machine, _ server: KeyAuthServerProcess, _ setup: ImpostorAgent.Setup, problem: String,
        arrange: (_ runtime: String) throws -> String
    ) throws {
        let runtime = TemporaryDirectory("keyauth-run")
        let scratch = TemporaryDirectory("keyauth-impostor")
        defer {
            runtime.remove()
            scratch.remove()
        }
        let listenAt = try arrange(runtime.path)
        let impostor = try ImpostorAgent(
            at: listenAt, setup, account: try machine.accounts.resolve(nil), scratch: scratch)
        defer { impostor.stop() }
        let directory = runtime.path + "/keyauth"
        let before = try FileManager.default.attributesOfItem(atPath: directory)
        for (arguments, input) in agentCommands(serverURL: server.url) {
            let run = try machine.run(
                arguments, standardInput: input, extraEnvironment: ["XDG_RUNTIME_DIR": runtime.path])
            #expect(run.status == 65, "\(setup) \(arguments): \(run.standardError)")
            #expect(run.standardError.contains(problem), "\(setup) \(arguments): \(run.standardError)")
            #expect(impostor.received.isEmpty, "\(setup) \(arguments) sent \(impostor.received.count) bytes")
        }
        // Refused, not repaired: nobody's directory is chmod-ed or chown-ed.
        let after = try FileManager.default.attributesOfItem(atPath: directory)
        #expect(after[.posixPermissions] as? Int == before[.posixPermissions] as? Int)
        #expect(after[.ownerAccountID] as? Int == before[.ownerAccountID] as? Int)
    }

    @Test("an agent of another user, in its own directory or behind a socket file of ours, learns nothing")
    func anotherUsersAgent() throws {
        guard getuid() == 0 else { return }
        try withServer { server in
            let machine = try AgentTests.registeredMachine(server)
            defer { machine.home.remove() }
            // A runtime directory others can write, as a shared or mistaken XDG_RUNTIME_DIR is.
            try Self.expectRefused(
                machine, server, .otherUser, problem: "belongs to uid \(Self.otherUID), not to you (uid 0)"
            ) { runtime in
                chmod(runtime, 0o1777)
                return runtime + "/keyauth/agent.sock"
            }
            // Every file looks right; only the kernel's word on the listener tells.
            try Self.expectRefused(
                machine, server, .otherPeer, problem: "it runs as uid \(Self.otherUID), not as you (uid 0)"
            ) { runtime in
                mkdir(runtime + "/keyauth", 0o700)
                return runtime + "/keyauth/agent.sock"
            }
        }
    }

    @Test("a loose directory, a symbolic link or another user's socket file is refused before anything is sent")
    func fileSystemChecks() throws {
        try withServer { server in
            let machine = try AgentTests.registeredMachine(server)
            defer { machine.home.remove() }
            try Self.expectRefused(machine, server, .sameUser, problem: "(mode 0777)") { runtime in
                mkdir(runtime + "/keyauth", 0o700)
                chmod(runtime + "/keyauth", 0o777)
                return runtime + "/keyauth/agent.sock"
            }
            try Self.expectRefused(machine, server, .sameUser, problem: "(mode 0750)") { runtime in
                mkdir(runtime + "/keyauth", 0o750)
                chmod(runtime + "/keyauth", 0o750)
                return runtime + "/keyauth/agent.sock"
            }
            // The directory is a link to a private directory elsewhere.
            try Self.expectRefused(machine, server, .sameUser, problem: "is a symbolic link") { runtime in
                mkdir(runtime + "/elsewhere", 0o700)
                symlink(runtime + "/elsewhere", runtime + "/keyauth")
                return runtime + "/elsewhere/agent.sock"
            }
            // The socket is a link to a socket elsewhere.
            try Self.expectRefused(machine, server, .sameUser, problem: "is a symbolic link") { runtime in
                mkdir(runtime + "/keyauth", 0o700)
                mkdir(runtime + "/elsewhere", 0o700)
                symlink(runtime + "/elsewhere/agent.sock", runtime + "/keyauth/agent.sock")
                return runtime + "/elsewhere/agent.sock"
            }
            guard getuid() == 0 else { return }
            try Self.expectRefused(
                machine, server, .otherSocketOwner, problem: "belongs to uid \(Self.otherUID), not to you (uid 0)"
            ) { runtime in
                mkdir(runtime + "/keyauth", 0o700)
                return runtime + "/keyauth/agent.sock"
            }
        }
    }
}
