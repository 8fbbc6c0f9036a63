import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A machine set up for host login through the real PAM module: a Linux user made for the test,
/// a `keyauth-server` process, a device of that user registered with a PIN in the user's own
/// keyauth home, a PAM service in `/etc/pam.d` that uses the built module, and the syslog
/// messages of every run collected.
///
/// Everything it adds to the system (the user, the service file, `/dev/log` when it made it, a
/// sudoers drop-in) is removed by ``remove()``, which ``withHostLogin(_:)`` calls on every path.
final class HostLoginMachine: @unchecked Sendable {
    static let pin = "731946"
    static let pamtester = "/usr/bin/pamtester"
    static let sudo = "/usr/bin/sudo"

    /// Whether this machine can run the tests: root, pamtester and useradd.
    static var canRun: Bool {
        geteuid() == 0 && FileManager.default.isExecutableFile(atPath: pamtester)
            && FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd")
    }

    let user: String
    let userHome: String
    let scratch: TemporaryDirectory
    /// The module built from PAMModule/ by scripts/build-pam-module.sh, as the package builds it.
    let module: String
    /// `keyauth-pam-helper`: a link to the built `keyauth`, as the package installs it.
    let helper: String
    let server: KeyAuthServerProcess
    let service: String
    let keyID: String
    let syslog: SyslogCapture
    /// The software TPM that holds the device key, or nil for a key file.
    let tpm: SoftwareTPM?
    private var addedFiles: [String] = []

    /// The keyauth home of the user, the helper's default.
    var keyauthHome: String { userHome + "/.local/share/keyauth" }
    var servicePath: String { "/etc/pam.d/" + service }

    /// The user's offline grant file, which the helper writes after an online login and
    /// ``remove()`` deletes.
    var grantPath: String { "/var/lib/keyauth-pam/" + user + ".grant" }

    /// - Parameters:
    ///   - tpm: a software TPM to hold the device key; a key file without one.
    ///   - serverArguments: added to the server's `serve` arguments.
    init(tpm: SoftwareTPM? = nil, serverArguments: [String] = []) throws {
        self.tpm = tpm
        guard geteuid() == 0 else { throw TestFailure("host login tests need root (useradd, /etc/pam.d)") }
        guard FileManager.default.isExecutableFile(atPath: Self.pamtester) else {
            throw TestFailure("pamtester is not installed (apt-get install pamtester)")
        }
        try Binaries.require(Binaries.keyauth)
        (module, helper) = try Self.builtModule.get()
        let suffix = String(UUID().uuidString.lowercased().filter(\.isHexDigit).prefix(8))
        user = "kapam" + suffix
        service = "keyauth-test-" + suffix
        scratch = TemporaryDirectory("keyauth-pam")
        syslog = try SyslogCapture()
        let added = try ExternalCommand.run(["useradd", "--create-home", "--shell", "/bin/sh", user], timeout: 30)
        guard added.status == 0 else {
            syslog.close()
            throw TestFailure("useradd failed: \(added.errorOutput)")
        }
        userHome = "/home/" + user
        do {
            server = try KeyAuthServerProcess.started(in: scratch.path, extraArguments: serverArguments)
            keyID = try Self.register(user: user, home: userHome, serverURL: server.url, tpm: tpm)
        } catch {
            _ = try? ExternalCommand.run(["userdel", "--remove", user], timeout: 30)
            syslog.close()
            scratch.remove()
            throw error
        }
        try writeService(server: server.url)
    }

    /// The module, built once per test process into a directory of its own.
    static let builtModule: Result<(module: String, helper: String), TestFailure> = {
        let directory = TemporaryDirectory("keyauth-pam-module")
        let output = directory.path + "/pam_keyauth.so"
        do {
            let built = try ExternalCommand.run(
                ["bash", Vectors.packageRoot.path + "/scripts/build-pam-module.sh", output], timeout: 120)
            guard built.status == 0 else { return .failure(TestFailure("build-pam-module.sh: \(built.errorOutput)")) }
        } catch {
            return .failure(TestFailure("build-pam-module.sh: \(error)"))
        }
        // The helper runs as the user once it has dropped root, so its binary must be where any
        // user may reach it, as /usr/libexec/keyauth is; a checkout under a 0700 directory (a
        // home, a mktemp -d) is not. The copy's directory is 0755.
        let copy = directory.path + "/bin/keyauth"
        let helper = directory.path + "/bin/" + PAMHelper.programName
        do {
            try FileManager.default.createDirectory(atPath: directory.path + "/bin", withIntermediateDirectories: false)
            try FileManager.default.copyItem(atPath: Binaries.keyauth, toPath: copy)
        } catch {
            return .failure(TestFailure("copying keyauth for the helper: \(error)"))
        }
        // The module too, for PAM run as the user (a screen locker): made while another test may
        // have narrowed the process's umask, it could be the owner's alone.
        guard chmod(directory.path, 0o755) == 0, chmod(directory.path + "/bin", 0o755) == 0, chmod(copy, 0o755) == 0,
            chmod(output, 0o755) == 0, symlink(copy, helper) == 0
        else { return .failure(TestFailure("preparing the helper: errno \(errno)")) }
        return .success((output, helper))
    }()

    /// Registers `user`'s device with ``pin`` as root, then gives the files to the user (the
    /// helper reads them as the user, and refuses files of anyone else).
    private static func register(user: String, home: String, serverURL: String, tpm: SoftwareTPM?) throws -> String {
        let keyauthHome = home + "/.local/share/keyauth"
        let environment = [
            "KEYAUTH_HOME": keyauthHome, "HOME": home, "KEYAUTH_TIMEOUT": "5", "PATH": "/usr/bin:/bin",
            TPMConnection.environmentVariable: tpm?.tcti ?? SoftwareTPM.absentTCTI,
        ]
        let registered = try runProcess(
            Binaries.keyauth,
            ["register", "--server", serverURL, "--user", user, "--bits", "2048", "--pin-stdin"]
                + (tpm == nil ? [] : ["--key-store", "tpm"]),
            environment: environment, standardInput: pin + "\n", timeout: 120)
        guard registered.status == 0 else { throw TestFailure("register failed: \(registered.standardError)") }
        let store = AccountStore(home: keyauthHome)
        guard let name = store.accountNames().first, let keyID = try store.load(name).keyID else {
            throw TestFailure("the registered account has no key ID")
        }
        let owned = try ExternalCommand.run(["chown", "-R", "\(user):\(user)", home + "/.local"], timeout: 30)
        guard owned.status == 0 else { throw TestFailure("chown failed: \(owned.errorOutput)") }
        return keyID
    }

    /// The test's PAM service: the module alone, so that its answer is the stack's answer.
    /// A plain http:// server (the test's, on loopback) needs the module's `insecure_http`.
    func writeService(server url: String, helper: String? = nil, timeout: Int = 20, extra: String = "") throws {
        let insecure = url.hasPrefix("http://") ? " insecure_http" : ""
        let text = """
            auth required \(module) helper=\(helper ?? self.helper) server=\(url)\(insecure) timeout=\(timeout)\(tpm.map { " tcti=" + $0.tcti } ?? "")\(extra)
            account required pam_permit.so
            session required pam_permit.so
            password required pam_deny.so

            """
        try writeSystemFile(servicePath, text)
    }

    /// Writes a file under /etc that ``remove()`` deletes.
    func writeSystemFile(_ path: String, _ text: String, mode: mode_t = 0o644) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, mode)
        if !addedFiles.contains(path) { addedFiles.append(path) }
    }

    /// `pamtester SERVICE USER authenticate` with `pin` on standard input.
    func pamtester(user: String? = nil, pin: String) throws -> CommandResult {
        try runProcess(
            Self.pamtester, ["-v", service, user ?? self.user, "authenticate"],
            environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], standardInput: pin + "\n", timeout: 90)
    }

    /// ``pamtester(user:pin:)`` run as a setuid-root program run by the test user runs it, as
    /// `su` and polkit's agent helper call PAM: real uid and gid the user's, no supplementary
    /// group, effective uid and gid root.
    func pamtesterFromUser(pin: String) throws -> CommandResult {
        guard let entry = getpwnam(user) else { throw TestFailure("no passwd entry for \(user)") }
        let switchUID =
            "import os, sys; os.setgroups([]); os.setresgid(\(entry.pointee.pw_gid), 0, 0); "
            + "os.setresuid(\(entry.pointee.pw_uid), 0, 0); os.execv(sys.argv[1], sys.argv[1:])"
        return try runProcess(
            "/usr/bin/python3", ["-c", switchUID, Self.pamtester, "-v", service, user, "authenticate"],
            environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], standardInput: pin + "\n", timeout: 90)
    }

    /// `sudo -k -S id -u` run by the test user (through `runuser`), with `pin` on standard input;
    /// `-k` so that a cached credential from an earlier run cannot answer for this one.
    func sudo(pin: String) throws -> CommandResult {
        try runProcess(
            "/usr/sbin/runuser", ["-u", user, "--", Self.sudo, "-k", "-S", "-u", "root", "/usr/bin/id", "-u"],
            environment: ["PATH": "/usr/bin:/bin", "LANG": "C"], standardInput: pin + "\n", timeout: 90)
    }

    /// A sudoers drop-in that lets the test user run anything as root, authenticated by the
    /// test's PAM service instead of /etc/pam.d/sudo (sudo's `pam_service`), so that the
    /// machine's own sudo configuration is never touched.
    func allowSudo() throws {
        try writeSystemFile(
            "/etc/sudoers.d/" + service, "Defaults:\(user) pam_service=\(service)\n\(user) ALL=(root) ALL\n",
            mode: 0o440)
    }

    /// Every file under the user's keyauth home and the server's directory, as text.
    func filesText() -> String {
        var text = ""
        for directory in [keyauthHome, scratch.path] {
            guard let walker = FileManager.default.enumerator(atPath: directory) else { continue }
            for case let name as String in walker {
                if let data = FileManager.default.contents(atPath: directory + "/" + name) {
                    text += String(decoding: data, as: UTF8.self)
                }
            }
        }
        return text
    }

    /// Undoes everything the machine added to the system.
    func remove() {
        for path in addedFiles { unlink(path) }
        unlink(grantPath)
        _ = server.terminate()
        _ = try? ExternalCommand.run(["userdel", "--remove", user], timeout: 30)
        syslog.close()
        scratch.remove()
    }
}

/// Runs `body` on a fresh ``HostLoginMachine`` and removes it afterwards, whatever happens; one
/// machine at a time in this process (``HostLoginTurn``).
func withHostLogin(
    tpm: SoftwareTPM? = nil, serverArguments: [String] = [], _ body: (HostLoginMachine) async throws -> Void
) async throws {
    await HostLoginTurn.shared.acquire()
    do {
        let machine = try HostLoginMachine(tpm: tpm, serverArguments: serverArguments)
        defer { machine.remove() }
        try await body(machine)
    } catch {
        await HostLoginTurn.shared.release()
        throw error
    }
    await HostLoginTurn.shared.release()
}

/// The turn of the host-login machines: the suites that make one (HostLoginTests,
/// OfflineHostLoginTests, PushLoginTests) are each serialized, but run beside each other, and
/// their machines share `/dev/log`, `/etc/passwd` and `/etc/pam.d`. Two at once raced to listen
/// on `/dev/log` (the second failed: `cannot listen on /dev/log: 98`). Waiting is a suspension,
/// not a blocked thread, so the test pool's threads stay free; turns are taken in order.
actor HostLoginTurn {
    static let shared = HostLoginTurn()
    private var taken = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        guard taken else {
            taken = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty {
            taken = false
        } else {
            waiting.removeFirst().resume()
        }
    }
}

/// The syslog messages sent while it exists: on a machine without a syslog daemon (a container)
/// it listens on `/dev/log` itself, and removes it afterwards; with a daemon it reads nothing
/// and says so (``isCapturing``).
///
/// A thread drains the socket as messages arrive. A datagram socket's queue holds only
/// `net.unix.max_dgram_qlen` messages (10 where systemd's sysctl defaults are absent), and a full
/// queue blocks every sender on the machine: `useradd`, `sudo` and the PAM module among them.
final class SyslogCapture: @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32 = -1
    private var collected = ""
    /// Where ``receivePending(_:)`` receives, under `lock`.
    private var buffer = [UInt8](repeating: 0, count: 8192)
    private var stopping = false
    private var drainer: Thread?
    let isCapturing: Bool

    init() throws {
        guard !FileManager.default.fileExists(atPath: "/dev/log") else {
            isCapturing = false
            return
        }
        let socketDescriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socketDescriptor >= 0 else { throw TestFailure("socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in "/dev/log".utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            Glibc.close(socketDescriptor)
            throw TestFailure("cannot listen on /dev/log: \(errno)")
        }
        chmod("/dev/log", 0o666)
        descriptor = socketDescriptor
        isCapturing = true
        let thread = Thread { [self] in drain(socketDescriptor) }
        thread.name = "syslog capture"
        drainer = thread
        thread.start()
    }

    /// Receives until ``close()``: it polls with a short timeout so that it notices the stop
    /// without a message arriving.
    private func drain(_ socketDescriptor: Int32) {
        while !(lock.withLock { stopping }) {
            var poller = pollfd(fd: socketDescriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            lock.withLock { receivePending(socketDescriptor) }
        }
    }

    /// Moves every queued message into `collected`. Called with `lock` held, so that a message is
    /// always either still queued or already collected, never in between.
    private func receivePending(_ socketDescriptor: Int32) {
        while true {
            let count = recv(socketDescriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            guard count > 0 else { return }
            collected += String(decoding: buffer[0..<count], as: UTF8.self) + "\n"
        }
    }

    /// What arrived so far, one message a line. A local datagram is queued by the time its
    /// sender's `send` returns, and what is queued is read here; a process that logs after the
    /// one a test waited for (a helper still finishing) gets 100 ms more, as before.
    var text: String {
        if isCapturing { usleep(100_000) }
        return lock.withLock {
            if descriptor >= 0 && !stopping { receivePending(descriptor) }
            return collected
        }
    }

    func close() {
        guard lock.withLock({ descriptor >= 0 && !stopping }) else { return }
        lock.withLock { stopping = true }
        while drainer?.isFinished == false { usleep(10_000) }
        Glibc.close(descriptor)
        unlink("/dev/log")
        descriptor = -1
    }
}
