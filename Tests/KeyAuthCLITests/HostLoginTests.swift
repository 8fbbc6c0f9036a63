import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The PAM module end to end: real libpam through `pamtester` and `sudo`, `pam_keyauth.so` as
/// scripts/build-pam-module.sh builds it, the built `keyauth` as its helper, a `keyauth-server`
/// process, a Linux user made for the test. Serialized: they share `/dev/log` and `/etc`.
/// Skipped without root or pamtester, except under `KEYAUTH_TEST_REQUIRE_TOOLS=1`, where they fail.
@Suite(
    "Host login through pam_keyauth", .serialized,
    .enabled(
        if: ExternalTools.shouldRun(installed: HostLoginMachine.canRun),
        "needs root, useradd and pamtester (apt-get install pamtester)"))
struct HostLoginTests {
    @Test("the right PIN logs in, a wrong one does not, and the PIN is written nowhere", .timeLimit(.minutes(5)))
    func rightAndWrongPIN() async throws {
        try await withHostLogin { machine in
            let right = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(right.status == 0, "\(right.standardError) \(machine.syslog.text)")
            #expect(right.standardOutput.contains("successfully authenticated"), "\(right.standardOutput)")
            // The server's audit trail has the host login, as the helper stated it.
            let audit = try KeyAuthServerProcess.runCommand(["audit", "--db", machine.scratch.path + "/server.db"])
            let line = audit.output.split(separator: "\n").first { $0.contains("host-login") }.map(String.init)
            #expect(line?.contains(machine.user) == true, "\(audit.output) \(audit.error)")
            #expect(line?.contains("service \(machine.service)") == true, "\(audit.output)")

            let wrong = try machine.pamtester(pin: "000000")
            #expect(wrong.status != 0)
            #expect(wrong.standardError.contains("Authentication failure"), "\(wrong.standardError)")

            let log = machine.syslog.text
            if machine.syslog.isCapturing {
                #expect(log.contains("logged in with the keyauth device key"), "\(log)")
                #expect(log.contains("wrong_pin"), "\(log)")
            }
            for (what, text) in [
                ("syslog", log), ("pamtester output", right.standardOutput + right.standardError),
                ("files", machine.filesText()), ("server log", machine.server.log),
            ] {
                #expect(!text.contains(HostLoginMachine.pin), "the PIN is in the \(what)")
                #expect(!text.contains("000000"), "the wrong PIN is in the \(what)")
            }
        }
    }

    @Test("a device key held by a TPM logs in with its PIN and is refused with a wrong one", .timeLimit(.minutes(5)))
    func tpmKey() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try await withHostLogin(tpm: tpm) { machine in
            let right = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(right.status == 0, "\(right.standardError) \(machine.syslog.text)")
            let wrong = try machine.pamtester(pin: "000000")
            #expect(wrong.status != 0)
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("wrong_pin"), "\(machine.syslog.text)")
            }
            // The prompt says how many wrong PINs the TPM still takes; once it is locked, the
            // module refuses before asking, with the wait, and even the right PIN is refused.
            let second = try machine.pamtester(pin: "000000")
            #expect(second.status != 0)
            let secondText = second.standardOutput + second.standardError
            #expect(secondText.contains("the TPM locks after"), "\(secondText)")
            _ = try machine.pamtester(pin: "000000")
            let locked = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(locked.status != 0)
            let lockedText = locked.standardOutput + locked.standardError
            #expect(!lockedText.contains("PIN for"), "no PIN is asked: \(lockedText)")
            #expect(lockedText.contains("locked after too many wrong PINs"), "\(lockedText)")
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("locked after too many wrong PINs"), "\(machine.syslog.text)")
            }
        }
    }

    @Test(
        "an empty PIN costs the TPM no try; wrong PINs typed at once at several prompts stop at its reserve",
        .timeLimit(.minutes(5)))
    func concurrentPromptsKeepTheReserve() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        // 5 tries, of which host logins leave 1 to the keyauth command.
        let setup = try runProcess(
            "/usr/bin/tpm2_dictionarylockout",
            [
                "-T", tpm.tcti, "--setup-parameters", "--max-tries=5", "--recovery-time=1000",
                "--lockout-recovery-time=1000",
            ],
            environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], timeout: 60)
        try #require(setup.status == 0, "\(setup.standardError)")
        try #require(try tpm.connection.info().maximumTries == 5)
        try await withHostLogin(tpm: tpm) { machine in
            // Enter alone, to go on to the next module, is refused before the TPM sees it.
            let empty = try machine.pamtester(pin: "")
            #expect(empty.status != 0)
            #expect(try tpm.connection.info().lockoutCounter == 0, "an empty PIN counted as a wrong one")
            // A helper holding the lock for long (its user can stop it there) delays the others
            // by the wait, then they go on without it: no TPM login of the machine is refused.
            let lock = open("/run/keyauth-tpm-tries.lock", O_RDONLY | O_CREAT | O_CLOEXEC, 0o600)
            try #require(lock >= 0)
            try #require(flock(lock, LOCK_EX) == 0)
            let waited = try machine.pamtester(pin: HostLoginMachine.pin)
            close(lock)
            #expect(waited.status == 0, "\(waited.standardError) \(machine.syslog.text)")
            // Six prompts at once, each answered with a wrong PIN: every one of them sees 5
            // tries left before asking.
            let (service, user) = (machine.service, machine.user)
            let statuses = Mutex<[Int32]>([])
            let finished = DispatchSemaphore(value: 0)
            for _ in 0..<6 {
                Thread.detachNewThread {
                    defer { finished.signal() }
                    let result = try? runProcess(
                        HostLoginMachine.pamtester, ["-v", service, user, "authenticate"],
                        environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], standardInput: "000000\n", timeout: 90)
                    statuses.withLock { $0.append(result?.status ?? -1) }
                }
            }
            for _ in 0..<6 { #expect(finished.wait(timeout: .now() + 120) == .success) }
            #expect(statuses.withLock { $0 }.allSatisfy { $0 != 0 && $0 != -1 }, "\(statuses.withLock { $0 })")
            let info = try tpm.connection.info()
            #expect(info.lockoutCounter == 4, "4 wrong PINs counted, the reserve's 1 left: \(info.lockoutCounter)")
            #expect(!info.isLockedOut)
        }
    }

    @Test("a revoked device is refused", .timeLimit(.minutes(5)))
    func revokedDevice() async throws {
        try await withHostLogin { machine in
            let revoked = try KeyAuthServerProcess.runCommand([
                "revoke", machine.keyID, "--db", machine.scratch.path + "/server.db",
            ])
            try #require(revoked.status == 0, "\(revoked.error)")
            let result = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(result.status != 0)
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("invalid_grant"), "\(machine.syslog.text)")
            }
        }
    }

    @Test(
        "another keyauth user's device, planted in the user's home as their account, does not log in",
        .timeLimit(.minutes(5)))
    func plantedDeviceOfAnotherUser() async throws {
        try await withHostLogin { machine in
            // Anything running as the user can write their keyauth home: here, an account of the
            // attacker's own keyauth user, its PIN known, relabelled as the user's.
            let attacker = machine.scratch.path + "/attacker"
            let registered = try runProcess(
                Binaries.keyauth,
                ["register", "--server", machine.server.url, "--user", "mallory", "--bits", "2048", "--pin-stdin"],
                environment: ["KEYAUTH_HOME": attacker, "HOME": machine.scratch.path, "KEYAUTH_TIMEOUT": "5"],
                standardInput: "246810\n", timeout: 120)
            try #require(registered.status == 0, "\(registered.standardError)")
            let accounts = machine.keyauthHome + "/accounts"
            let name = try #require(AccountStore(home: attacker).accountNames().first)
            let planted = accounts + "/" + name
            let script = """
                set -e
                rm -rf '\(accounts)'/*
                cp -a '\(attacker)/accounts/\(name)' '\(planted)'
                sed -i 's/"user" *: *"mallory"/"user":"\(machine.user)"/' '\(planted)/account.json'
                grep -q '"user":"\(machine.user)"' '\(planted)/account.json'
                chown -R '\(machine.user):\(machine.user)' '\(machine.keyauthHome)'
                """
            let moved = try ExternalCommand.run(["sh", "-c", script], timeout: 30)
            try #require(moved.status == 0, "\(moved.errorOutput)")

            let result = try machine.pamtester(pin: "246810")
            #expect(result.status != 0, "\(machine.syslog.text)")
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("access_denied"), "\(machine.syslog.text)")
            }
        }
    }

    @Test("a user without a keyauth account, or without a Linux account, is refused", .timeLimit(.minutes(5)))
    func unknownUsers() async throws {
        try await withHostLogin { machine in
            let root = try machine.pamtester(user: "root", pin: HostLoginMachine.pin)
            #expect(root.status != 0)
            let nobody = try machine.pamtester(user: "kapam-no-such-user", pin: HostLoginMachine.pin)
            #expect(nobody.status != 0)
            if machine.syslog.isCapturing {
                let log = machine.syslog.text
                #expect(log.contains("no keyauth account of root"), "\(log)")
                #expect(log.contains("no Linux user kapam-no-such-user"), "\(log)")
            }
        }
    }

    @Test("with the server down, or an account on another server, the login fails closed", .timeLimit(.minutes(5)))
    func serverDownAndOtherServer() async throws {
        try await withHostLogin { machine in
            // An account the user pointed at another server is not one root allowed.
            try machine.writeService(server: "http://127.0.0.1:1")
            let other = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(other.status != 0)
            // A relative file would be found from the directory whoever runs sudo is in.
            try machine.writeService(server: machine.server.url, extra: " users=pam-users")
            #expect(try machine.pamtester(pin: HostLoginMachine.pin).status != 0)

            try machine.writeService(server: machine.server.url)
            _ = machine.server.terminate()
            let down = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(down.status != 0)
            if machine.syslog.isCapturing {
                let log = machine.syslog.text
                #expect(log.contains("no keyauth account of \(machine.user) on http://127.0.0.1:1"), "\(log)")
                #expect(log.contains("transport_failed"), "\(log)")
                #expect(log.contains("users= and hostconf= must be absolute paths"), "\(log)")
            }
        }
    }

    @Test(
        "a helper that hangs is killed at the timeout, one that answers nonsense is refused, one that answers before taking the PIN is heard",
        .timeLimit(.minutes(5)))
    func hangingAndMalformedHelpers() async throws {
        try await withHostLogin { machine in
            let pidFile = machine.scratch.path + "/helper.pid"
            let hanging = machine.scratch.path + "/hanging-helper"
            try Data("#!/bin/sh\necho $$ > \(pidFile)\nexec sleep 120\n".utf8).write(to: URL(fileURLWithPath: hanging))
            chmod(hanging, 0o755)
            try machine.writeService(server: machine.server.url, helper: hanging, timeout: 1)
            let started = Date()
            let hung = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(hung.status != 0)
            #expect(Date().timeIntervalSince(started) < 60, "the module waited past its timeout")
            let pidText = try String(contentsOfFile: pidFile, encoding: .utf8)
            let pid = try #require(Int32(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
            #expect(kill(pid, 0) == -1 && errno == ESRCH, "the hanging helper \(pid) is still running")

            let malformed = machine.scratch.path + "/malformed-helper"
            try Data("#!/bin/sh\necho 'yes please'\n".utf8).write(to: URL(fileURLWithPath: malformed))
            chmod(malformed, 0o755)
            try machine.writeService(server: machine.server.url, helper: malformed, timeout: 5)
            let nonsense = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(nonsense.status != 0)

            // A helper that asks for the PIN, then finds the login cannot go on and answers
            // without reading it (it shut its reading side first, so sending the PIN fails every
            // time): its answer decides, not the failed send.
            let impatient = machine.scratch.path + "/impatient-helper"
            let impatientScript = [
                "#!/usr/bin/python3", "import os, socket, time",
                "socket.socket(fileno=os.dup(0)).shutdown(socket.SHUT_RD)",
                #"os.write(1, b"pin PIN: \nrefused the key is locked for 60 s after wrong PINs\n")"#,
                "time.sleep(5)", "",
            ]
            try Data(impatientScript.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: impatient))
            chmod(impatient, 0o755)
            try machine.writeService(server: machine.server.url, helper: impatient, timeout: 5)
            let refused = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(refused.status != 0)
            #expect(refused.standardError.contains("Authentication failure"), "\(refused.standardError)")
            #expect(
                (refused.standardOutput + refused.standardError).contains("keyauth: the key is locked for 60 s"),
                "\(refused.standardOutput)")
            if machine.syslog.isCapturing {
                let log = machine.syslog.text
                #expect(log.contains("the helper did not answer in time"), "\(log)")
                #expect(log.contains("malformed answer from the helper"), "\(log)")
                #expect(log.contains("the helper did not take the PIN"), "\(log)")
                #expect(log.contains("refused: the key is locked for 60 s after wrong PINs"), "\(log)")
            }
        }
    }

    @Test(
        "sudo through the module runs a command with the right PIN and refuses a wrong one",
        .enabled(
            if: ExternalTools.shouldRun(installed: FileManager.default.isExecutableFile(atPath: HostLoginMachine.sudo)),
            "sudo is not installed"),
        .timeLimit(.minutes(5)))
    func sudoThroughTheModule() async throws {
        try await withHostLogin { machine in
            try machine.allowSudo()
            let wrong = try machine.sudo(pin: "000000")
            #expect(wrong.status != 0, "\(wrong.standardOutput)")
            let right = try machine.sudo(pin: HostLoginMachine.pin)
            #expect(right.status == 0, "\(right.standardError) \(machine.syslog.text)")
            #expect(right.standardOutput == "0\n")
            #expect(!machine.syslog.text.contains(HostLoginMachine.pin))
        }
    }
}

@Suite("The pam_keyauth module as built")
struct PAMModuleBuildTests {
    @Test("exports the three PAM entry points and nothing of the Swift runtime", .timeLimit(.minutes(5)))
    func exportsEntryPointsOnly() throws {
        let module = try HostLoginMachine.builtModule.get().module
        let symbols = try ExternalCommand.run(["nm", "-D", "--defined-only", module], timeout: 30)
        let exported = symbols.output.split(separator: "\n").compactMap { line -> String? in
            let fields = line.split(separator: " ")
            return fields.count == 3 && fields[1] == "T" ? String(fields[2]) : nil
        }
        #expect(exported.sorted() == ["pam_sm_acct_mgmt", "pam_sm_authenticate", "pam_sm_setcred"])
        let libraries = try ExternalCommand.run(["ldd", module], timeout: 30)
        #expect(libraries.output.contains("libpam.so"), "\(libraries.output)")
        #expect(!libraries.output.lowercased().contains("swift"), "\(libraries.output)")
        #expect(!libraries.output.contains("libstdc++"), "\(libraries.output)")
    }
}
