import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthCLI
@testable import KeyAuthServer

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth agent` as an ssh-agent: the built binary holds a PIN-protected key file, `ssh-add`
/// lists its certificate and key through `SSH_AUTH_SOCK`, and a real `sshd` that trusts the
/// server's CA lets in `ssh -o IdentityAgent=...` with no key file on the command line.
@Suite(
    "keyauth agent as an ssh-agent", .serialized, .timeLimit(.minutes(5)),
    .enabled(if: ExternalTools.shouldRun(installed: OpenSSHServer.isInstalled && getuid() == 0)))
struct SSHAgentTests {
    static let pin = "482916"

    /// The built `keyauth agent --pin-stdin` for the harness's account, in a runtime directory of its own.
    final class Agent {
        let runtime = TemporaryDirectory("keyauth-run")
        let scratch = TemporaryDirectory("keyauth-agent")
        let process: ChildProcess
        var sshSocket: String { runtime.path + "/keyauth/ssh-agent.sock" }
        var socket: String { runtime.path + "/keyauth/agent.sock" }

        init(_ device: CommandHarness) throws {
            try Data((SSHAgentTests.pin + "\n").utf8).write(to: URL(fileURLWithPath: scratch.path + "/pin"))
            process = try ChildProcess(
                Binaries.keyauth, ["agent", "--pin-stdin"],
                environment: device.environment.merging(["XDG_RUNTIME_DIR": runtime.path]) { $1 },
                standardInput: .file(scratch.path + "/pin"), standardError: .file(scratch.path + "/stderr"))
            // The bound only stops a broken agent hanging the test.
            for _ in 0..<300 where locked() != false && process.isRunning { Thread.sleep(forTimeInterval: 0.1) }
        }

        /// What the agent wrote to its standard error so far.
        var errorOutput: String {
            (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
        }

        /// Waits until the agent's standard error contains `text`, or it ends, or 30 s pass
        /// (the bound only stops a broken agent hanging the test).
        func waitForErrorOutput(containing text: String) {
            let deadline = Date().addingTimeInterval(30)
            while !errorOutput.contains(text), process.isRunning, Date() < deadline {
                Thread.sleep(forTimeInterval: 0.1)
            }
        }

        func locked() -> Bool? {
            (try? KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: socket))?.locked
        }

        /// `ssh-add ARGUMENTS` with `SSH_AUTH_SOCK` naming the agent's ssh socket.
        func sshAdd(_ arguments: [String]) throws -> ExternalCommand {
            try ExternalCommand.run(
                ["ssh-add"] + arguments, environment: ["PATH": "/usr/bin:/bin", "SSH_AUTH_SOCK": sshSocket],
                timeout: 30)
        }

        func stop() {
            _ = process.stop()
            runtime.remove()
            scratch.remove()
        }
    }

    @Test("ssh-add lists the certificate and the key; sshd lets ssh in through the agent; locked, it does not")
    func logsInThroughTheAgent() async throws {
        let setup = try await SSHLoginTests.Setup(pin: Self.pin)
        defer { setup.remove() }
        let issued = await setup.device.run(["ssh", "cert", "--pin-stdin"], standardInput: Self.pin + "\n")
        try #require(issued.status == 0, "\(issued.standardError)")
        let agent = try Agent(setup.device)
        defer { agent.stop() }
        try #require(agent.locked() == false)
        #expect(fileMode(agent.sshSocket) == 0o600)

        let listed = try agent.sshAdd(["-l"])
        #expect(listed.status == 0, "\(listed.errorOutput)")
        let lines = listed.output.split(separator: "\n")
        #expect(lines.count == 2, "\(listed.output)")
        #expect(lines.first?.contains("(RSA-CERT)") == true, "\(listed.output)")
        #expect(lines.last?.contains("(RSA)") == true, "\(listed.output)")
        // The certificate `keyauth ssh cert` wrote is far from expiry: the agent keeps it.
        #expect(!agent.errorOutput.contains("ssh certificate"), "\(agent.errorOutput)")
        let publicKeys = try agent.sshAdd(["-L"])
        #expect(publicKeys.output.hasPrefix("ssh-rsa-cert-v01@openssh.com "), "\(publicKeys.output)")
        // What the agent does not do, it refuses, and it serves on.
        #expect(try agent.sshAdd(["-D"]).status != 0)
        #expect(try agent.sshAdd(["-l"]).status == 0)

        let host = try OpenSSHServer(
            caLine: setup.authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["alice"]])
        defer { host.stop() }
        let login = try host.login(as: "root", agent: agent.sshSocket)
        #expect(login.status == 0, "\(login.errorOutput)\n\(host.log)")
        #expect(login.output == "logged-in\n")
        #expect(host.log.contains("Accepted certificate ID \"keyauth user alice device"), "\(host.log)")

        let lock = try ChildProcess.run(
            Binaries.keyauth, ["agent", "--lock"],
            environment: setup.device.environment.merging(["XDG_RUNTIME_DIR": agent.runtime.path]) { $1 })
        #expect(lock.termination.status == 0, "\(lock.standardError)")
        #expect(try agent.sshAdd(["-l"]).status != 0)
        let refused = try host.login(as: "root", agent: agent.sshSocket)
        #expect(refused.status == 255)
        #expect(refused.output.isEmpty)
    }

    @Test("unlocked without `keyauth ssh cert`, the agent fetches the certificate itself, offers it, and says so")
    func agentFetchesItsCertificate() async throws {
        let setup = try await SSHLoginTests.Setup(pin: Self.pin)
        defer { setup.remove() }
        let certificate = try setup.keyDirectory + "/device-key.pem-cert.pub"
        #expect(access(certificate, F_OK) != 0)
        let agent = try Agent(setup.device)
        defer { agent.stop() }
        try #require(agent.locked() == false)
        agent.waitForErrorOutput(containing: "ssh certificate renewed")
        #expect(
            agent.errorOutput.contains("keyauth agent: ssh certificate renewed, valid until "), "\(agent.errorOutput)")
        #expect(fileMode(certificate) == 0o600)
        let line = try String(contentsOfFile: certificate, encoding: .utf8)
        #expect(line.hasPrefix("ssh-rsa-cert-v01@openssh.com "))
        let listed = try agent.sshAdd(["-l"])
        #expect(listed.status == 0, "\(listed.errorOutput)")
        #expect(listed.output.split(separator: "\n").first?.contains("(RSA-CERT)") == true, "\(listed.output)")
        let keys = try agent.sshAdd(["-L"])
        #expect(keys.output.hasPrefix(line.split(separator: " ").prefix(2).joined(separator: " ")), "\(keys.output)")
    }

    @Test("a certificate that expires within 10 minutes is replaced by the agent with the server's")
    func agentReplacesExpiringCertificate() async throws {
        let setup = try await SSHLoginTests.Setup(pin: Self.pin)
        defer { setup.remove() }
        let keys = try setup.keyDirectory
        let publicKey = try RSAPublicKey(
            pemRepresentation: Array(try String(contentsOfFile: keys + "/device-key.pub", encoding: .utf8).utf8))
        let now = UInt64(time(nil))
        // Signed by the server's own CA, so only its expiry in 5 minutes (of 8 hours) calls for a
        // new one.
        let expiring = try SSHUserCertificate(
            publicKey: .rsa(publicKey), serial: 7, keyID: "expiring", principals: ["alice"],
            validAfter: now - 8 * 3600 + 300, validBefore: now + 300, extensions: ["permit-pty": ""]
        ).line(signedBy: setup.authority, nonce: Array(repeating: 5, count: 32), comment: "expiring")
        let certificate = keys + "/device-key.pem-cert.pub"
        try (expiring + "\n").write(toFile: certificate, atomically: true, encoding: .utf8)
        let agent = try Agent(setup.device)
        defer { agent.stop() }
        try #require(agent.locked() == false)
        agent.waitForErrorOutput(containing: "ssh certificate renewed")
        #expect(agent.errorOutput.contains("keyauth agent: ssh certificate renewed"), "\(agent.errorOutput)")
        let line = try String(contentsOfFile: certificate, encoding: .utf8)
        #expect(line != expiring + "\n")
        let blob = try #require(SSHAgentProtocol.certificateBlob(line: line, of: publicKey))
        let validBefore = try #require(SSHAgentProtocol.certificateValidity(blob)?.before)
        #expect(validBefore > now + 3600)
    }

    @Test("with a server that issues no SSH certificates, the agent says so once and serves the key alone")
    func serverWithoutCertificateAuthority() async throws {
        let server = try InProcessKeyAuthServer()
        defer { server.stop() }
        let device = CommandHarness()
        defer { device.home.remove() }
        let agent = try await Self.registerAndStartAgent(device, on: server.url, ["--bits", "2048"])
        defer { agent.stop() }
        try #require(agent.locked() == false)
        agent.waitForErrorOutput(containing: "issues no SSH certificates")
        let said = agent.errorOutput.components(separatedBy: "issues no SSH certificates").count - 1
        #expect(said == 1, "\(agent.errorOutput)")
        #expect(agent.errorOutput.contains("the agent offers the key alone and asks again every 300 s"))
        #expect(!agent.errorOutput.contains("cannot fetch"), "\(agent.errorOutput)")
        let listed = try agent.sshAdd(["-l"])
        #expect(listed.status == 0, "\(listed.errorOutput)")
        #expect(listed.output.split(separator: "\n").count == 1, "\(listed.output)")
        #expect(agent.locked() == false)
    }

    @Test("an oversized or cut request gets SSH_AGENT_FAILURE, and the agent serves the next connection")
    func hostileRequests() async throws {
        try await Self.withUnlockedAgent { agent, _ in
            for request: [UInt8] in [[0x7F, 0xFF, 0xFF, 0xFF], [0, 0, 0, 9, 13, 0], [0, 0, 0, 1, 99]] {
                let connection = try #require(try KeyAgentSocket.connect(to: agent.sshSocket))
                defer { close(connection) }
                #expect(DescriptorIO.writeAll(connection, bytes: request))
                shutdown(connection, Int32(SHUT_WR))
                #expect(SSHAgentProtocol.readMessage(connection) == .message([SSHAgentProtocol.failure]))
            }
            // The agent serves on after them.
            let listed = try agent.sshAdd(["-l"])
            #expect(listed.status == 0, "\(listed.errorOutput)")
            #expect(listed.output.contains("(RSA)"), "\(listed.output)")
        }
    }

    @Test("a client holding its ssh connection open does not hold up another, and is still served after it")
    func heldConnectionDoesNotHoldOthersUp() async throws {
        try await Self.withUnlockedAgent { agent, _ in
            // The agent fetches a certificate once unlocked, which changes the identities it lists.
            agent.waitForErrorOutput(containing: "ssh certificate renewed")
            try #require(agent.errorOutput.contains("ssh certificate renewed"), "\(agent.errorOutput)")
            // A client mid-authentication: it has the identities and keeps its connection open.
            let held = try #require(try KeyAgentSocket.connect(to: agent.sshSocket))
            defer { close(held) }
            let first = try #require(Self.identities(on: held), "no identities on the first connection")
            #expect(first.first == 12)
            // A second client meanwhile gets its answer.
            let other = try #require(try KeyAgentSocket.connect(to: agent.sshSocket))
            defer { close(other) }
            #expect(Self.identities(on: other) == first)
            // The first is still served. Served one at a time, the second waited until the agent
            // gave the first up at its 5 s read limit, and the first was closed by then. (Only a
            // test thread stalled for those 5 s between the first answer and here could see that
            // with nothing wrong; a wait for it would hide the very delay this test is about.)
            #expect(Self.identities(on: held) == first)
        }
    }

    @Test("at 8 connections a 9th waits, and is served once one of the 8 ends")
    func ninthConnectionWaitsForASlot() async throws {
        try await Self.withUnlockedAgent { agent, _ in
            // Eight clients, each answered once and holding its connection.
            var held: [Int32] = []
            defer { for connection in held { close(connection) } }
            for _ in 0..<KeyAgentServer.sshConnectionLimit {
                let connection = try #require(try KeyAgentSocket.connect(to: agent.sshSocket))
                held.append(connection)
                let answer = try #require(Self.identities(on: connection), "no identities on connection \(held.count)")
                #expect(answer.first == 12)
            }
            let ninth = try #require(try KeyAgentSocket.connect(to: agent.sshSocket))
            defer { close(ninth) }
            #expect(DescriptorIO.sendAll(ninth, bytes: Self.listIdentities))
            // Not served while the 8 are held. A stalled test may have let the agent drop one at its
            // 5 s read limit, which frees a slot; only then may the 9th have its answer already.
            var waiting = pollfd(fd: ninth, events: Int16(POLLIN), revents: 0)
            let servedEarly = poll(&waiting, 1, 300) > 0
            #expect(!servedEarly || held.contains { Self.isClosedByPeer($0) }, "a 9th connection was served beside 8")
            // One of the 8 ends: its thread wakes the loop, which serves the 9th. Without that wake
            // the loop would sleep until the unlock expires, hours from now.
            close(held.removeFirst())
            guard case .message(let answer) = SSHAgentProtocol.readMessage(ninth, deadline: .now + .seconds(30)) else {
                Issue.record("the 9th connection was not served after a slot came free")
                return
            }
            #expect(answer.first == 12)
        }
    }

    /// Exit statuses written by several threads.
    private final class Statuses: Sendable {
        private let values: Mutex<[Int32]>
        init(count: Int) { values = Mutex(Array(repeating: -1, count: count)) }
        func set(_ index: Int, _ status: Int32) { values.withLock { $0[index] = status } }
        var all: [Int32] { values.withLock { $0 } }
    }

    /// `SSH_AGENTC_REQUEST_IDENTITIES` with its length: what `ssh-add -l` asks first.
    static let listIdentities: [UInt8] = [0, 0, 0, 1, 11]

    /// Asks for the identities on `connection`, left open: the answer's body, nil when none came.
    static func identities(on connection: Int32) -> [UInt8]? {
        guard DescriptorIO.sendAll(connection, bytes: listIdentities),
            case .message(let body) = SSHAgentProtocol.readMessage(connection)
        else { return nil }
        return body
    }

    /// Runs `body` with an unlocked agent on a fresh setup (a server with an SSH CA, a device
    /// registered with a PIN), both removed afterwards.
    private static func withUnlockedAgent(_ body: (Agent, SSHLoginTests.Setup) async throws -> Void) async throws {
        let setup = try await SSHLoginTests.Setup(pin: pin)
        defer { setup.remove() }
        let agent = try Agent(setup.device)
        defer { agent.stop() }
        try #require(agent.locked() == false)
        try await body(agent, setup)
    }

    /// Whether the other end closed `connection` (a read would return 0 now).
    private static func isClosedByPeer(_ connection: Int32) -> Bool {
        var byte: UInt8 = 0
        return recv(connection, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 0
    }

    @Test("four ssh-keygen -Y sign at once through the agent each get a signature that verifies")
    func concurrentSignatures() async throws {
        try await Self.withUnlockedAgent { agent, setup in
            try Self.signConcurrently(agent: agent, in: setup.directory.path, count: 4)
        }
    }

    @Test("an ssh connection that keeps asking does not keep a lock from the agent: the lock is served and holds")
    func lockWhileAnSSHConnectionAsks() async throws {
        // A peer that asks every second on one connection, as a forwarded agent's remote end may.
        try await Self.expectLockServed { connection, going in
            while going.load(ordering: .relaxed), DescriptorIO.sendAll(connection, bytes: Self.listIdentities) {
                guard case .message = SSHAgentProtocol.readMessage(connection) else { return }
                Thread.sleep(forTimeInterval: 1)
            }
        }
    }

    @Test("an ssh message sent a byte at a time does not hold up a lock: the lock is served and holds")
    func lockWhileAMessageTrickles() async throws {
        // A 1 KiB message, one byte a second: each read comes well within a socket timeout, and
        // the whole would take 17 minutes, far past the lock's 30 s wait for its answer.
        let message: [UInt8] = [0, 0, 4, 0] + [UInt8](repeating: 11, count: 1024)
        try await Self.expectLockServed { connection, going in
            for byte in message where going.load(ordering: .relaxed) {
                guard DescriptorIO.sendAll(connection, bytes: [byte]) else { return }
                Thread.sleep(forTimeInterval: 1)
            }
        }
    }

    /// Starts an unlocked agent, runs `peer` on a thread with a connection to its ssh socket
    /// (until `going` turns false), and checks that a `--lock` sent meanwhile is answered well
    /// within a client's 30 s wait, and locks the agent.
    private static func expectLockServed(
        peer: @escaping @Sendable (_ connection: Int32, _ going: borrowing Atomic<Bool>) -> Void
    ) async throws {
        try await Self.withUnlockedAgent { agent, _ in
            let connection = try #require(try KeyAgentSocket.connect(to: agent.sshSocket))
            defer { close(connection) }
            let going = Going()
            let thread = Thread { peer(connection, going.flag) }
            thread.start()
            defer { going.flag.store(false, ordering: .relaxed) }
            try await Task.sleep(for: .milliseconds(1500))
            let started = Date()
            let locked = try KeyAgentSocket.exchange(KeyAgentRequest(op: "lock"), at: agent.socket)
            #expect(locked?.ok == true, "the lock got no answer while the peer held its connection")
            #expect(Date().timeIntervalSince(started) < 20)
            #expect(agent.locked() == true)
        }
    }

    /// The flag a peer thread reads to know it should go on.
    private final class Going: Sendable {
        let flag = Atomic(true)
    }

    @Test("ssh-keygen -Y sign has the agent make an rsa-sha2-512 signature that ssh-keygen -Y verify accepts")
    func sha512SignatureVerifies() async throws {
        try await Self.withUnlockedAgent { agent, setup in
            try Self.signAndVerify(agent: agent, in: setup.directory.path)
        }
    }

    /// Registers alice on `server` from `device` with `options` and the PIN, then starts the agent
    /// (which the caller stops).
    static func registerAndStartAgent(
        _ device: CommandHarness, on server: String, _ options: [String]
    ) async throws -> Agent {
        let registered = await device.run(
            ["register", "--server", server, "--user", "alice"] + options + ["--pin-stdin"],
            standardInput: pin + "\n")
        try #require(registered.status == 0, "\(registered.standardError)")
        return try Agent(device)
    }

    /// Has `ssh-keygen -Y sign` sign a file in `directory` through `agent` with its plain key,
    /// then checks with `ssh-keygen -Y verify` and that the signature is an `rsa-sha2-512` one.
    static func signAndVerify(agent: Agent, in directory: String) throws {
        let listed = try agent.sshAdd(["-L"])
        // The plain key's line (the agent may have fetched a certificate by now, listed first).
        let keyLine = try #require(
            listed.output.split(separator: "\n").first { $0.hasPrefix("ssh-rsa ") }.map(String.init),
            "\(listed.errorOutput)")
        #expect(keyLine.hasPrefix("ssh-rsa "))
        try (keyLine + "\n").write(toFile: directory + "/key.pub", atomically: true, encoding: .utf8)
        try "alice \(keyLine)\n".write(toFile: directory + "/allowed", atomically: true, encoding: .utf8)
        try "signed through the agent\n".write(toFile: directory + "/data", atomically: true, encoding: .utf8)
        let environment = ["PATH": "/usr/bin:/bin", "SSH_AUTH_SOCK": agent.sshSocket]
        let signed = try ExternalCommand.run(
            ["ssh-keygen", "-Y", "sign", "-f", directory + "/key.pub", "-n", "file", directory + "/data"],
            environment: environment, timeout: 30)
        #expect(signed.status == 0, "\(signed.errorOutput)")
        let verified = try ExternalCommand.run(
            [
                "sh", "-c", "ssh-keygen -Y verify -f \"$1/allowed\" -I alice -n file -s \"$1/data.sig\" < \"$1/data\"",
                "sh", directory,
            ], environment: environment, timeout: 30)
        #expect(verified.status == 0, "\(verified.output)\(verified.errorOutput)")
        #expect(verified.output.contains("Good \"file\" signature for alice"), "\(verified.output)")
        // The signature blob inside names its algorithm: rsa-sha2-512, what ssh-keygen asks for.
        let armored = try String(contentsOfFile: directory + "/data.sig", encoding: .utf8)
        let base64 = armored.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        let blob = try #require(Data(base64Encoded: base64))
        #expect(blob.range(of: Data("rsa-sha2-512".utf8)) != nil)
    }

    /// Has `count` `ssh-keygen -Y sign` processes sign files in `directory` through `agent` at
    /// once, then checks every signature with `ssh-keygen -Y verify`.
    static func signConcurrently(agent: Agent, in directory: String, count: Int) throws {
        let listed = try agent.sshAdd(["-L"])
        let keyLine = try #require(
            listed.output.split(separator: "\n").first { $0.hasPrefix("ssh-rsa ") }.map(String.init),
            "\(listed.errorOutput)")
        try (keyLine + "\n").write(toFile: directory + "/key.pub", atomically: true, encoding: .utf8)
        try "alice \(keyLine)\n".write(toFile: directory + "/allowed", atomically: true, encoding: .utf8)
        for index in 0..<count {
            try "file \(index)\n".write(toFile: directory + "/data\(index)", atomically: true, encoding: .utf8)
        }
        let environment = ["PATH": "/usr/bin:/bin", "SSH_AUTH_SOCK": agent.sshSocket]
        // A thread each (concurrentPerform would run only as many at once as there are cores).
        let statuses = Statuses(count: count)
        let finished = DispatchGroup()
        for index in 0..<count {
            finished.enter()
            Thread.detachNewThread {
                let signed = try? ExternalCommand.run(
                    [
                        "ssh-keygen", "-Y", "sign", "-f", directory + "/key.pub", "-n", "file",
                        directory + "/data\(index)",
                    ],
                    environment: environment, timeout: 60)
                statuses.set(index, signed?.status ?? -1)
                finished.leave()
            }
        }
        // ExternalCommand's own 60 s bound ends each thread; this one only stops a hang here.
        #expect(finished.wait(timeout: .now() + 120) == .success)
        #expect(statuses.all == Array(repeating: 0, count: count))
        for index in 0..<count {
            let data = directory + "/data\(index)"
            let verified = try ExternalCommand.run(
                [
                    "sh", "-c", "ssh-keygen -Y verify -f \"$1\" -I alice -n file -s \"$2.sig\" < \"$2\"",
                    "sh", directory + "/allowed", data,
                ], environment: environment, timeout: 30)
            #expect(verified.status == 0, "\(index): \(verified.output)\(verified.errorOutput)")
        }
    }

    @Test("a TPM key logs in through the agent with ssh's default rsa-sha2-512, and with rsa-sha2-256")
    func tpmKeyLogsIn() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let directory = TemporaryDirectory("keyauth-ssh-tpm")
        defer { directory.remove() }
        let authority = try SSHCertificateAuthority.generate(.ed25519)
        try authority.write(to: directory.path + "/ssh-ca.pem")
        let server = try InProcessKeyAuthServer(sshCAKeyFile: directory.path + "/ssh-ca.pem")
        defer { server.stop() }
        let device = CommandHarness(tcti: tpm.tcti)
        defer { device.home.remove() }
        let registered = await device.run(
            ["register", "--server", server.url, "--user", "alice", "--key-store", "tpm", "--pin-stdin"],
            standardInput: Self.pin + "\n")
        try #require(registered.status == 0, "\(registered.standardError)")
        let issued = await device.run(["ssh", "cert", "--pin-stdin"], standardInput: Self.pin + "\n")
        try #require(issued.status == 0, "\(issued.standardError)")
        let config = await device.run(["ssh", "config"])
        #expect(config.status == 0, "\(config.standardError)")
        #expect(config.standardOutput.contains("IdentityAgent ${XDG_RUNTIME_DIR}/keyauth/ssh-agent.sock"))
        #expect(!config.standardOutput.contains("PubkeyAcceptedAlgorithms"))

        let agent = try Agent(device)
        defer { agent.stop() }
        try #require(agent.locked() == false)
        #expect(try agent.sshAdd(["-l"]).output.contains("(RSA-CERT)"))
        let host = try OpenSSHServer(
            caLine: authority.publicKeyLine(comment: "keyauth-ca"), principals: ["root": ["alice"]])
        defer { host.stop() }
        // ssh's default; the first algorithm it offers for an RSA certificate is rsa-sha2-512.
        let login = try host.login(as: "root", agent: agent.sshSocket)
        #expect(login.status == 0, "\(login.errorOutput)\n\(host.log)")
        #expect(login.output == "logged-in\n")
        // Each digest alone, so that sshd itself checks a signature of each kind from the TPM.
        for limit in [
            "rsa-sha2-512-cert-v01@openssh.com,rsa-sha2-512", "rsa-sha2-256-cert-v01@openssh.com,rsa-sha2-256",
        ] {
            let limited = try host.login(
                as: "root", agent: agent.sshSocket, options: ["-o", "PubkeyAcceptedAlgorithms=\(limit)"])
            #expect(limited.status == 0, "\(limit): \(limited.errorOutput)\n\(host.log)")
            #expect(limited.output == "logged-in\n")
        }
    }

    @Test(
        "ssh-keygen -Y sign has the agent make an rsa-sha2-512 signature in the TPM that ssh-keygen -Y verify accepts")
    func tpmSHA512SignatureVerifies() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let server = try InProcessKeyAuthServer()
        defer { server.stop() }
        let device = CommandHarness(tcti: tpm.tcti)
        defer { device.home.remove() }
        let agent = try await Self.registerAndStartAgent(device, on: server.url, ["--key-store", "tpm"])
        defer { agent.stop() }
        try #require(agent.locked() == false)
        let directory = TemporaryDirectory("keyauth-ssh-tpm-sign")
        defer { directory.remove() }
        try Self.signAndVerify(agent: agent, in: directory.path)
        // Several at once, each signature through the TPM (a smoke test: it passes whether they
        // overlap or not, and would catch a TPM context broken by sharing).
        try Self.signConcurrently(agent: agent, in: directory.path, count: 3)

        // A TPM that cannot be asked whether it signs SHA-512 gets the SHA-256 limit, which
        // every TPM meets.
        tpm.stop()
        let config = await device.run(["ssh", "config"])
        #expect(config.status == 0, "\(config.standardError)")
        #expect(
            config.standardOutput.contains(
                "    PubkeyAcceptedAlgorithms rsa-sha2-256-cert-v01@openssh.com,rsa-sha2-256\n"),
            "\(config.standardOutput)")
        #expect(config.standardOutput.contains("makes no SHA-512 signatures, or did not answer"))
    }
}
