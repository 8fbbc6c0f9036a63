import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Push login end to end: a real sshd (keyboard-interactive through PAM) with the built
/// `pam_keyauth.so` in `mode=push`, the real `ssh` client on a pseudo-terminal, a host client of
/// a `keyauth-server` process, and the user's device answering with the real `keyauth approve`,
/// typing the code the ssh session shows. Serialized with the other host login tests' needs:
/// they share `/dev/log` and `/etc/pam.d`.
@Suite(
    "Push login over ssh through pam_keyauth", .serialized,
    .enabled(
        if: ExternalTools.shouldRun(
            installed: HostLoginMachine.canRun && OpenSSHServer.isInstalled
                && FileManager.default.isExecutableFile(atPath: "/usr/bin/ssh")),
        "needs root, useradd, pamtester, sshd and ssh"))
struct PushLoginTests {
    @Test(
        "approved on the device with the code the ssh session shows, the login succeeds and is audited",
        .timeLimit(.minutes(5)))
    func approved() async throws {
        try await withPushHost { host in
            try host.logInApprovingOnTheDevice()
            let audit = try KeyAuthServerProcess.runCommand([
                "audit", "--db", host.machine.scratch.path + "/server.db",
            ])
            let line = audit.output.split(separator: "\n").first { $0.contains("host-login") }.map(String.init)
            #expect(line?.contains(host.hostName) == true, "\(audit.output)")
            #expect(line?.contains("push") == true, "\(audit.output)")
            #expect(line?.contains("device:" + host.machine.keyID) == true, "\(audit.output)")
        }
    }

    @Test(
        "in mode auto, a user without a device key on the host logs in by push", .timeLimit(.minutes(5)))
    func autoFallsBackToPush() async throws {
        // No keyauth home on this host (home= names none): the device is elsewhere.
        try await withPushHost(moduleArguments: "home=/nonexistent/%u") { host in
            try host.logInApprovingOnTheDevice()
        }
    }

    @Test("denied on the device, the login fails", .timeLimit(.minutes(5)))
    func denied() async throws {
        try await withPushHost { host in
            let session = try host.sshd.interactiveLogin(as: host.machine.user)
            _ = try host.code(shownBy: session)
            // Typing deny at the code prompt denies the request.
            _ = try host.deviceAnswers("deny\n")
            session.type("\n")
            host.expectRefused(session, because: "push login denied")
        }
    }

    @Test("not answered before the request expires, the login fails", .timeLimit(.minutes(5)))
    func timedOut() async throws {
        try await withPushHost(serverArguments: ["--sign-in-lifetime", "10s"]) { host in
            let session = try host.sshd.interactiveLogin(as: host.machine.user)
            _ = try host.code(shownBy: session)
            session.type("\n")
            host.expectRefused(session, because: "before the request expired")
        }
    }

    @Test("Ctrl-C at the prompt ends the login, and no helper is left polling", .timeLimit(.minutes(5)))
    func interrupted() async throws {
        try await withPushHost { host in
            let session = try host.sshd.interactiveLogin(as: host.machine.user)
            _ = try host.code(shownBy: session)
            // The helper waits as the user (its threads run with the user's uid; the main thread,
            // parked by the runtime, still shows root), so it is found by its threads' user.
            let userThreads = {
                Set(
                    try runProcess("/bin/ps", ["-eLo", "pid=,euser:40="], environment: [:]).standardOutput
                        .split(separator: "\n").compactMap { line -> Int32? in
                            let fields = line.split(separator: " ")
                            guard fields.count == 2, fields[1] == host.machine.user else { return nil }
                            return Int32(fields[0])
                        })
            }
            let helpers = try userThreads()
            #expect(!helpers.isEmpty, "the helper waits as the user")
            session.type("\u{03}")
            let status = session.wait(timeout: 30)
            #expect(status != nil && status != 0)
            #expect(!session.standardOutput.contains("logged-in"))
            // Once ssh is gone, the module ends the login and kills its helper: none may stay.
            let deadline = Date().addingTimeInterval(20)
            var left = helpers
            repeat {
                left = helpers.filter { kill($0, 0) == 0 }
                if left.isEmpty { break }
                try await Task.sleep(for: .milliseconds(500))
            } while Date() < deadline
            #expect(left.isEmpty, "helper still running: \(left)")
        }
    }

    @Test("a user not on the host client's list is refused before any device is asked", .timeLimit(.minutes(5)))
    func userNotAllowed() async throws {
        try await withPushHost(allowedUser: "someone-else") { host in
            let session = try host.sshd.interactiveLogin(as: host.machine.user)
            host.expectRefused(session, because: "may not log in to host \(host.hostName)")
            let audit = try KeyAuthServerProcess.runCommand([
                "audit", "--db", host.machine.scratch.path + "/server.db",
            ])
            #expect(!audit.output.contains("host-login"), "\(audit.output)")
        }
    }
}

extension PushLoginTests {
    @Test(
        "sudo on a terminal shows the code and runs the command once the device approves",
        .enabled(
            if: ExternalTools.shouldRun(installed: FileManager.default.isExecutableFile(atPath: HostLoginMachine.sudo)),
            "sudo is not installed"),
        .timeLimit(.minutes(5)))
    func sudoByPush() async throws {
        try await withPushHost { host in
            try host.machine.allowSudo()
            let session = try TerminalProcess(
                "/usr/sbin/runuser",
                ["-u", host.machine.user, "--", HostLoginMachine.sudo, "-k", "-u", "root", "/usr/bin/id", "-u"],
                environment: ["PATH": "/usr/bin:/bin", "LANG": "C"])
            try host.approve(in: session)
            #expect(session.standardOutput == "0\n")
        }
    }

    @Test(
        "a screen locker (PAM run as the user) on a host with root's pam.conf logs in with the device key",
        .timeLimit(.minutes(5)))
    func screenLockerWithRootOnlyHostConfig() async throws {
        try await withPushHost(moduleArguments: "mode=local") { host in
            // pamtester as the user, as a screen locker runs PAM: the helper cannot open pam.conf.
            let unlocked = try runProcess(
                "/usr/sbin/runuser",
                [
                    "-u", host.machine.user, "--", HostLoginMachine.pamtester, "-v", host.machine.service,
                    host.machine.user, "authenticate",
                ],
                environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], standardInput: HostLoginMachine.pin + "\n",
                timeout: 90)
            #expect(unlocked.status == 0, "\(unlocked.standardError) \(host.machine.syslog.text)")
        }
    }

    @Test(
        "a device key login on a host client obeys the client's user list too", .timeLimit(.minutes(5)))
    func deviceKeyLoginObeysTheList() async throws {
        try await withPushHost(moduleArguments: "mode=local") { host in
            let allowed = try host.machine.pamtester(pin: HostLoginMachine.pin)
            #expect(allowed.status == 0, "\(allowed.standardError) \(host.machine.syslog.text)")
        }
        try await withPushHost(allowedUser: "someone-else", moduleArguments: "mode=local") { host in
            let refused = try host.machine.pamtester(pin: HostLoginMachine.pin)
            #expect(refused.status != 0)
            if host.machine.syslog.isCapturing {
                let log = host.machine.syslog.text
                #expect(log.contains("may not log in to host \(host.hostName)"), "\(log)")
            }
        }
    }
}

/// A host set up for push login: a ``HostLoginMachine`` (its user's device is the one that
/// approves), a host client of its server with credentials in a pam.conf of the test's own, the
/// PAM service in push mode, and an sshd running it.
struct PushHost {
    let machine: HostLoginMachine
    let sshd: OpenSSHServer
    /// The host client's name, which the device shows and the audit trail records.
    let hostName: String

    /// Reads the ssh session's terminal until the module's prompt, and returns the code it shows.
    func code(shownBy session: TerminalProcess) throws -> String {
        let shown = session.readUntil("Press Enter", timeout: 30)
        let text = shown + session.standardError
        guard let match = text.firstMatch(of: /type the code ([0-9]+)/) else {
            throw TestFailure("no code in the ssh session: \(text) \(sshd.log) \(machine.syslog.text)")
        }
        return String(match.1)
    }

    /// Logs in with ssh, approves on the device with the code the session shows and the PIN,
    /// presses Enter, and expects the login to succeed.
    func logInApprovingOnTheDevice() throws {
        let session = try sshd.interactiveLogin(as: machine.user)
        try approve(in: session)
        #expect(session.standardOutput.contains("logged-in"))
    }

    /// Approves on the device with the code `session` shows and the PIN, presses Enter there, and
    /// expects the session to end with success.
    func approve(in session: TerminalProcess) throws {
        let code = try code(shownBy: session)
        let approval = try deviceAnswers(code + "\n" + HostLoginMachine.pin + "\n")
        #expect(approval.status == 0, "\(approval.standardError)")
        session.type("\n")
        let status = session.wait(timeout: 60)
        #expect(status == 0, "\(session.standardError) \(sshd.log) \(machine.syslog.text)")
    }

    /// Expects the ssh session to end without logging in, and the journal (when the test reads
    /// it) to give `reason`.
    func expectRefused(_ session: TerminalProcess, because reason: String) {
        let status = session.wait(timeout: 90)
        #expect(status != nil && status != 0)
        #expect(!session.standardOutput.contains("logged-in"))
        if machine.syslog.isCapturing {
            #expect(machine.syslog.text.contains(reason), "\(machine.syslog.text)")
        }
    }

    /// `keyauth approve --pin-stdin` on the user's device (as the user, in the user's keyauth
    /// home), with `input` as what the user types: the code, then the PIN.
    func deviceAnswers(_ input: String) throws -> CommandResult {
        let keyauth = (machine.helper as NSString).deletingLastPathComponent + "/keyauth"
        return try runProcess(
            "/usr/sbin/runuser",
            [
                "-u", machine.user, "--", "/usr/bin/env", "HOME=" + machine.userHome,
                "KEYAUTH_HOME=" + machine.keyauthHome, "KEYAUTH_TIMEOUT=5", keyauth, "approve", "--pin-stdin",
            ], environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], standardInput: input, timeout: 60)
    }
}

/// Runs `body` with a ``PushHost`` whose host client allows `allowedUser` (the machine's user
/// when nil), and removes everything afterwards.
///
/// - Parameter moduleArguments: more arguments of the module; `mode=push` by default.
func withPushHost(
    serverArguments: [String] = [], allowedUser: String? = nil, moduleArguments: String = "mode=push",
    _ body: (PushHost) async throws -> Void
) async throws {
    try await withHostLogin(serverArguments: serverArguments) { machine in
        let hostName = "host-" + machine.service
        let added = try KeyAuthServerProcess.runCommand([
            "clients", "add", hostName, "--kind", "host", "--allow-user", allowedUser ?? machine.user, "--db",
            machine.scratch.path + "/server.db",
        ])
        guard added.status == 0 else { throw TestFailure("clients add: \(added.error)") }
        // What an administrator does: the printed lines are the file, root's, mode 0600.
        let config = machine.scratch.path + "/pam.conf"
        guard FileManager.default.createFile(atPath: config, contents: Data(added.output.utf8)),
            chmod(config, 0o600) == 0
        else { throw TestFailure("cannot write \(config)") }
        try machine.writeSystemFile(
            machine.servicePath,
            """
            auth required \(machine.module) helper=\(machine.helper) server=\(machine.server.url) insecure_http timeout=20 \(moduleArguments) hostconf=\(config)
            account required pam_permit.so
            session required pam_permit.so
            password required pam_deny.so

            """)
        let sshd = try OpenSSHServer(pamService: machine.service)
        defer { sshd.stop() }
        try await body(PushHost(machine: machine, sshd: sshd, hostName: hostName))
    }
}
