import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// A software TPM (swtpm) for one test, with its own state directory and loopback port.
///
/// swtpm runs under a small shell that kills it when this process's end of a pipe closes: on
/// ``stop()``, when the instance is released, and also when the test process dies or is killed,
/// so that no TPM outlives the test run. It is killed with SIGKILL, like a TPM losing power. Each instance starts from a fresh state, which makes it
/// a different TPM (new seeds) from every other instance: a second instance is "another machine".
///
/// The state directory is absolute: swtpm changes its working directory, and a relative one puts
/// the TPM into failure mode. `--flags not-need-init,startup-clear` makes it usable at once.
/// Its lockout parameters are swtpm's defaults: 3 tries, then 1000 seconds per try regained.
public final class SoftwareTPM: @unchecked Sendable {
    /// The TPM's state (NV memory, seeds); kept across ``stop()`` and ``start()``.
    public let stateDirectory: TemporaryDirectory
    /// The command port; the control port is the next one.
    public private(set) var port: UInt16 = 0
    private var process: ChildProcess?
    private var lifeline: Pipe?

    /// A TCTI that reaches no TPM: the environment of a machine without one, so that a test
    /// expecting key files never uses a TPM the machine running it may have.
    public static let absentTCTI = "device:/nonexistent/keyauth-test/tpmrm0"

    /// The TCTI string that reaches this TPM.
    public var tcti: String { "swtpm:host=127.0.0.1,port=\(port)" }

    /// The connection for the library.
    public var connection: TPMConnection {
        get throws { try TPMConnection(tcti: tcti) }
    }

    /// The local CA that signed the TPM's endorsement key certificates, when it was made with
    /// them: `swtpm-localca-rootca-cert.pem` (the root) and `issuercert.pem` (the intermediate
    /// that signed them).
    public let endorsementCA: TemporaryDirectory?

    /// The root certificate of ``endorsementCA``.
    public var endorsementRootCertificatePath: String? {
        endorsementCA.map { $0.path + "/swtpm-localca-rootca-cert.pem" }
    }

    /// The intermediate certificate of ``endorsementCA``, which signed the TPM's certificates.
    public var endorsementIntermediateCertificatePath: String? {
        endorsementCA.map { $0.path + "/issuercert.pem" }
    }

    /// Starts a TPM with a fresh state.
    ///
    /// - Parameter endorsementCertificates: manufacture the TPM first as a vendor would, with
    ///   `swtpm_setup --create-ek-cert`: endorsement keys (RSA-2048 and NIST P-384) whose
    ///   certificates, signed by a local CA of its own (``endorsementCA``), are stored in NV
    ///   memory. Without it the TPM has no certificates, like many firmware TPMs.
    /// - Parameter firstPort: the command port tried first, without checking that it is free (for
    ///   the test that a port held by another listener is not mistaken for the TPM); later tries,
    ///   and every try without it, use a free pair below the kernel's ephemeral range.
    public init(endorsementCertificates: Bool = false, firstPort: UInt16? = nil) throws {
        stateDirectory = TemporaryDirectory("keyauth-swtpm")
        if endorsementCertificates {
            let authority = TemporaryDirectory("keyauth-swtpm-ca")
            endorsementCA = authority
            do {
                try Self.manufacture(state: stateDirectory.path, authority: authority.path)
            } catch {
                authority.remove()
                stateDirectory.remove()
                throw error
            }
        } else {
            endorsementCA = nil
        }
        var lastError: Error = SoftwareTPMError("no free port pair found")
        for attempt in 0..<10 {
            port =
                attempt == 0
                ? firstPort ?? LoopbackPorts.freeBelowEphemeralRange(count: 2)
                : LoopbackPorts.freeBelowEphemeralRange(count: 2)
            do {
                try start()
                return
            } catch {
                lastError = error
            }
        }
        stateDirectory.remove()
        endorsementCA?.remove()
        throw lastError
    }

    deinit {
        stop()
        stateDirectory.remove()
        endorsementCA?.remove()
    }

    /// Runs `swtpm_setup` on `state` with a local CA in `authority`, configured there rather than
    /// in /etc and /var/lib, so that each TPM has its own CA and nothing outside the test's
    /// directories is touched.
    private static func manufacture(state: String, authority: String) throws {
        let files = [
            "localca.conf": """
            statedir = \(authority)
            signingkey = \(authority)/signkey.pem
            issuercert = \(authority)/issuercert.pem
            certserial = \(authority)/certserial

            """,
            "localca.options": "--platform-manufacturer keyauth-tests\n",
            "setup.conf": """
            create_certs_tool = /usr/bin/swtpm_localca
            create_certs_tool_config = \(authority)/localca.conf
            create_certs_tool_options = \(authority)/localca.options
            active_pcr_banks = sha256

            """,
        ]
        for (name, contents) in files {
            try Data(contents.utf8).write(to: URL(fileURLWithPath: authority + "/" + name))
        }
        let result = try ExternalCommand.run([
            "swtpm_setup", "--tpm2", "--tpmstate", state, "--create-ek-cert", "--config", authority + "/setup.conf",
            "--overwrite",
        ])
        guard result.status == 0 else {
            throw SoftwareTPMError("swtpm_setup failed: \(result.output) \(result.errorOutput)")
        }
    }

    /// Whether swtpm is running.
    public var isRunning: Bool { process?.isRunning ?? false }

    /// Starts swtpm on ``port`` with the existing state (after ``stop()``: "the TPM came back").
    public func start() throws {
        guard !isRunning else { return }
        unlink(pidFile)
        let script = """
            exec 3<&0
            swtpm socket --tpm2 --tpmstate dir="$1" --server type=tcp,bindaddr=127.0.0.1,port="$2" \
                --ctrl type=tcp,bindaddr=127.0.0.1,port="$3" --flags not-need-init,startup-clear --pid file="$4" &
            tpm=$!
            { read -r _ <&3; kill -KILL "$tpm" 2>/dev/null; } &
            wait "$tpm"
            """
        let lifeline = Pipe()
        // Only this process may hold the write end: ChildProcess gives its children nothing
        // but their standard streams, but anything else that forks (a library) would keep the
        // lifeline open, and swtpm would outlive stop().
        _ = fcntl(lifeline.fileHandleForWriting.fileDescriptor, F_SETFD, FD_CLOEXEC)
        // A group of its own, so that killing the shell kills swtpm and the watcher too.
        let process = try ChildProcess(
            "/bin/sh",
            [
                "-c", script, "swtpm-lifeline", stateDirectory.path, String(port), String(port + 1),
                pidFile,
            ],
            environment: ProcessInfo.processInfo.environment,
            standardInput: .descriptor(lifeline.fileHandleForReading.fileDescriptor), grouping: .ownGroup)
        self.process = process
        self.lifeline = lifeline
        // Ready when swtpm has written its pid file, which it does only after binding both
        // ports, and the command port accepts a connection (closed at once: swtpm serves one
        // client at a time). The port alone is not enough: when swtpm cannot bind because
        // another test's listener holds the port, that listener accepts the connection, and
        // the TPM's commands would go to it (seen in CI as "tcti:IO failure").
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            guard process.isRunning else { break }
            if FileManager.default.fileExists(atPath: pidFile), LoopbackPorts.canConnect(port: port) { return }
            usleep(20_000)
        }
        stop()
        throw SoftwareTPMError("swtpm did not start on port \(port)")
    }

    /// Gives the owner hierarchy a password, with tpm2-tools, as an administrator who took
    /// ownership would: keyauth then cannot make keys on this TPM.
    public func setOwnerPassword(_ password: String) throws {
        let result = try ExternalCommand.run(["tpm2_changeauth", "-T", tcti, "-c", "owner", password])
        guard result.status == 0 else { throw SoftwareTPMError("tpm2_changeauth failed: \(result.errorOutput)") }
    }

    /// Stops swtpm (as a TPM that vanished: no orderly shutdown) and waits until it has exited;
    /// after 10 s the shell's whole group is killed.
    public func stop() {
        guard let process else { return }
        try? lifeline?.fileHandleForWriting.close()
        if process.wait(timeout: 10) == nil { process.kill() }
        self.process = nil
        self.lifeline = nil
    }

    /// Where swtpm writes its process id once its ports are bound; swtpm keeps only its own
    /// `tpm2-*` files in the state directory, so the pid file can live there too.
    private var pidFile: String { stateDirectory.path + "/swtpm.pid" }
}

/// A software TPM could not be started.
public struct SoftwareTPMError: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
