import Foundation
import KeyAuthTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// A real OpenSSH server on loopback (`sshd -D -e -f CONFIG`), trusting one user CA, with the
/// principals of each account from files the test writes: what a host that trusts keyauth's SSH
/// CA runs.
final class OpenSSHServer: Sendable {
    static let executable = "/usr/sbin/sshd"
    static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: executable) }

    let directory: TemporaryDirectory
    let port: UInt16
    private let process: ChildProcess

    /// Starts sshd trusting `caLine` (a `TrustedUserCAKeys` line); returns once it listens.
    ///
    /// - Parameters:
    ///   - principals: the principals each local account accepts (`AuthorizedPrincipalsFile`).
    ///   - revokedKeys: a `RevokedKeys` file, if any.
    convenience init(caLine: String, principals: [String: [String]], revokedKeys: String? = nil) throws {
        let directory = TemporaryDirectory("keyauth-sshd")
        let path = directory.path
        try (caLine + "\n").write(toFile: path + "/ca.pub", atomically: true, encoding: .utf8)
        mkdir(path + "/principals", 0o755)
        for (account, names) in principals {
            try (names.joined(separator: "\n") + "\n").write(
                toFile: path + "/principals/" + account, atomically: true, encoding: .utf8)
        }
        try self.init(
            directory: directory,
            settings: """
                TrustedUserCAKeys \(path)/ca.pub
                AuthorizedPrincipalsFile \(path)/principals/%u
                AuthorizedKeysFile none
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                UsePAM no
                PermitRootLogin prohibit-password
                \(revokedKeys.map { "RevokedKeys \($0)" } ?? "")
                """)
    }

    /// Starts sshd with keyboard-interactive authentication through PAM alone, as a host that
    /// logs users in with `pam_keyauth` has it, running the PAM service `service`.
    ///
    /// OpenSSH 9 names its PAM service after the program, so sshd runs through a link named
    /// `service`: the test's own file in /etc/pam.d, never the machine's `sshd`.
    convenience init(pamService service: String) throws {
        let directory = TemporaryDirectory("keyauth-sshd")
        let link = directory.path + "/" + service
        guard symlink(Self.executable, link) == 0 else { throw TestFailure("symlink: errno \(errno)") }
        try self.init(
            directory: directory,
            settings: """
                AuthorizedKeysFile none
                PubkeyAuthentication no
                PasswordAuthentication no
                KbdInteractiveAuthentication yes
                AuthenticationMethods keyboard-interactive
                UsePAM yes
                PermitRootLogin no
                """, executable: link)
    }

    /// Starts `executable` (sshd) in the foreground with a fresh host key and `settings` added
    /// to the common configuration; returns once it listens.
    private init(directory: TemporaryDirectory, settings: String, executable: String = OpenSSHServer.executable)
        throws
    {
        self.directory = directory
        let path = directory.path
        // sshd checks its privilege-separation directory even in the foreground.
        mkdir("/run/sshd", 0o755)
        let hostKey = try ExternalCommand.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path + "/host_key"])
        guard hostKey.status == 0 else { throw TestFailure("ssh-keygen: \(hostKey.errorOutput)") }
        port = LoopbackPorts.freeBelowEphemeralRange()
        let config = """
            Port \(port)
            ListenAddress 127.0.0.1
            HostKey \(path)/host_key
            PidFile \(path)/sshd.pid
            StrictModes no
            LogLevel VERBOSE
            \(settings)

            """
        try config.write(toFile: path + "/sshd_config", atomically: true, encoding: .utf8)
        process = try ChildProcess(
            executable, ["-D", "-e", "-f", path + "/sshd_config"], environment: [:],
            standardError: .file(path + "/sshd.log"))
        for _ in 0..<600 {
            // The pid file is written once sshd has bound the port; before it, whatever accepts
            // the connection is not this sshd.
            if FileManager.default.fileExists(atPath: path + "/sshd.pid"), LoopbackPorts.canConnect(port: port) {
                return
            }
            guard process.isRunning else { break }
            usleep(50_000)
        }
        _ = process.stop()
        throw TestFailure(
            "sshd did not start: \((try? String(contentsOfFile: path + "/sshd.log", encoding: .utf8)) ?? "")")
    }

    /// What sshd logged.
    var log: String { (try? String(contentsOfFile: directory.path + "/sshd.log", encoding: .utf8)) ?? "" }

    /// Runs `ssh` to `account` with `identity` (a key file) and its certificate, running `command`.
    ///
    /// - Parameters:
    ///   - certificate: a certificate to use, copied with the key to `id-cert.pub` beside `id`;
    ///     nil for the one ssh finds beside `identity` (`IDENTITY-cert.pub`).
    ///   - askPass: the passphrase ssh asks for (through `SSH_ASKPASS`), for a key with a PIN.
    func login(
        as account: String, identity: String, certificate: String? = nil, command: String = "echo logged-in",
        askPass: String? = nil
    ) throws -> ExternalCommand {
        var identity = identity
        if let certificate {
            let copy = directory.path + "/id-\(UUID().uuidString)"
            try FileManager.default.copyItem(atPath: identity, toPath: copy)
            try FileManager.default.copyItem(atPath: certificate, toPath: copy + "-cert.pub")
            chmod(copy, 0o600)
            identity = copy
        }
        var environment = ["PATH": "/usr/bin:/bin", "HOME": directory.path]
        var batch = ["-o", "BatchMode=yes"]
        if let askPass {
            let script = directory.path + "/askpass"
            try "#!/bin/sh\nprintf '%s\\n' '\(askPass)'\n".write(toFile: script, atomically: true, encoding: .utf8)
            chmod(script, 0o700)
            environment["SSH_ASKPASS"] = script
            environment["SSH_ASKPASS_REQUIRE"] = "force"
            environment["DISPLAY"] = ":0"
            // One passphrase attempt and no password prompts after it, so that a wrong passphrase
            // fails at once instead of after several slow key decryptions.
            batch = ["-o", "NumberOfPasswordPrompts=1", "-o", "PreferredAuthentications=publickey"]
        }
        return try ssh(
            ["-i", identity, "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none"] + batch, as: account,
            command: command, environment: environment)
    }

    /// Runs `ssh` to `account` with no key file, only the keys of the ssh-agent at `agent`.
    ///
    /// - Parameter options: more `ssh` options, such as what `keyauth ssh config` prints.
    func login(
        as account: String, agent: String, options: [String] = [], command: String = "echo logged-in"
    ) throws -> ExternalCommand {
        try ssh(
            ["-o", "IdentityAgent=\(agent)", "-o", "IdentitiesOnly=no", "-o", "BatchMode=yes"] + options, as: account,
            command: command, environment: ["PATH": "/usr/bin:/bin", "HOME": directory.path])
    }

    private func ssh(
        _ options: [String], as account: String, command: String, environment: [String: String]
    ) throws -> ExternalCommand {
        try ExternalCommand.run(
            ["ssh", "-F", "/dev/null", "-p", String(port)] + options
                + [
                    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                    "\(account)@127.0.0.1", command,
                ],
            environment: environment, timeout: 30)
    }

    /// Starts `ssh` to `account` on a pseudo-terminal with keyboard-interactive authentication
    /// only, as a person types it: ssh reads the answers to the server's prompts from the
    /// terminal, which the test reads and types into.
    func interactiveLogin(as account: String, command: String = "echo logged-in") throws -> TerminalProcess {
        try TerminalProcess(
            "/usr/bin/ssh",
            [
                "-F", "/dev/null", "-p", String(port), "-o", "PreferredAuthentications=keyboard-interactive",
                "-o", "PubkeyAuthentication=no", "-o", "IdentityAgent=none", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "NumberOfPasswordPrompts=1",
                "\(account)@127.0.0.1", command,
            ], environment: ["PATH": "/usr/bin:/bin", "HOME": directory.path])
    }

    func stop() {
        _ = process.stop()
        directory.remove()
    }
}
