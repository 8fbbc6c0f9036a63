import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Debian's Apache as a child process of one test, never the system service: its configuration,
/// pid file, mutexes, documents and error log all live in a temporary directory of its own, and it
/// listens on one loopback port.
///
/// The tests use it as a real OpenID Connect relying party (mod_auth_openidc), so its
/// configuration is a small base written here (modules, port, paths) followed by the site's own
/// text, which may `Include` a file of the repository. Started as root, as CI runs, Apache's
/// workers switch to `www-data`, so the directory and the documents are made readable by others.
///
/// It is spawned with `posix_spawn` rather than Foundation's `Process`, for two reasons met on
/// this toolchain: a test's thread has SIGTERM blocked and `Process` passes that mask on, so
/// Apache never saw its stop signal; and `Process` learns of an exit through a socket every
/// descendant inherits, so Apache's workers, orphaned by a killed parent, kept `waitUntilExit`
/// waiting for ever. Here Apache starts with an empty signal mask in a process group of its own,
/// and stopping signals the whole group.
public final class ApacheServer: @unchecked Sendable {
    /// Debian's `apache2` binary.
    public static let binary = "/usr/sbin/apache2"
    /// Where Debian installs the loadable modules.
    public static let moduleDirectory = "/usr/lib/apache2/modules"

    /// Whether `apache2` and every module in `modules` are installed.
    public static func isInstalled(modules: [String]) -> Bool {
        FileManager.default.isExecutableFile(atPath: binary)
            && modules.allSatisfy { FileManager.default.fileExists(atPath: moduleDirectory + "/mod_\($0).so") }
    }

    /// The loopback port it listens on.
    public let port: UInt16
    /// The server's directory: configuration, logs, runtime files and `htdocs`.
    public let directory: TemporaryDirectory
    /// The parent's process id, also its process group's; 0 once it has been reaped.
    private var processID: pid_t = 0
    /// The parent's wait status, once reaped.
    private var reapedStatus: Int32?

    /// The document root.
    public var documentRoot: String { directory.path + "/htdocs" }
    /// The error log, where mod_auth_openidc writes what it did.
    public var errorLogPath: String { directory.path + "/error.log" }
    /// The site's URL with the host name `localhost`, a different site from `127.0.0.1`: browsers
    /// keep cookies per host name, not per port.
    public var url: String { "http://localhost:\(port)" }

    /// A free loopback port for a server that must know its own URL before it starts (a
    /// redirect URI registered with the provider first).
    public static func freePort() -> UInt16 { ClosedPort().port }

    /// Writes the configuration and the documents and starts Apache in the foreground, returning
    /// once it accepts connections.
    ///
    /// - Parameters:
    ///   - port: the loopback port (see ``freePort()``).
    ///   - modules: modules to load besides `mpm_event`, `authz_core` and `authn_core`, by their
    ///     Debian names (`auth_openidc`, `include`).
    ///   - defines: `Define NAME VALUE` lines, which the site's text reads as `${NAME}`.
    ///   - site: configuration appended to the base.
    ///   - documents: files under the document root, by relative path.
    /// - Throws: ``TestFailure`` with Apache's standard error and error log when it does not start.
    public init(
        port: UInt16, modules: [String], defines: [String: String] = [:], site: String,
        documents: [String: String] = [:]
    ) throws {
        try Binaries.require(Self.binary)
        self.port = port
        directory = TemporaryDirectory("keyauth-apache")
        let root = directory.path
        for subdirectory in ["", "/run", "/htdocs"] {
            try FileManager.default.createDirectory(atPath: root + subdirectory, withIntermediateDirectories: true)
            chmod(root + subdirectory, 0o755)
        }
        for (path, text) in documents {
            let file = documentRoot + "/" + path
            let parent = (file as NSString).deletingLastPathComponent
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            chmod(parent, 0o755)
            try text.write(toFile: file, atomically: true, encoding: .utf8)
            chmod(file, 0o644)
        }
        let configuration = root + "/httpd.conf"
        try Self.configuration(root: root, port: port, modules: modules, defines: defines, site: site)
            .write(toFile: configuration, atomically: true, encoding: .utf8)

        processID = try Self.spawn(
            [Self.binary, "-f", configuration, "-DFOREGROUND"],
            environment: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"], standardError: root + "/stderr")
        do {
            try waitUntilListening()
        } catch {
            stop()
            throw error
        }
    }

    deinit {
        stop()
        directory.remove()
    }

    /// What Apache wrote to standard error (configuration errors, before the error log opens)
    /// and the last lines of its error log, for failure messages.
    public var diagnostics: String {
        let standardError = (try? String(contentsOfFile: directory.path + "/stderr", encoding: .utf8)) ?? ""
        let log = (try? String(contentsOfFile: errorLogPath, encoding: .utf8)) ?? ""
        let tail = log.split(separator: "\n").suffix(60).joined(separator: "\n")
        return "apache2 standard error:\n\(standardError)\nerror log (last lines):\n\(tail)"
    }

    /// Stops Apache with SIGTERM to its process group, its immediate stop, and waits for the
    /// parent; SIGKILL to the group after 10 s, and to any worker left, so that none outlives
    /// the test.
    public func stop() {
        guard processID > 0 else { return }
        kill(-processID, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while exitStatus() == nil, Date() < deadline { usleep(20_000) }
        kill(-processID, SIGKILL)
        if !hasBeenReaped {
            var status: Int32 = 0
            waitpid(processID, &status, 0)
        }
        processID = 0
    }

    /// The parent's exit status once it has exited (reaping it), nil while it runs.
    private func exitStatus() -> Int32? {
        if let reapedStatus { return reapedStatus }
        var status: Int32 = 0
        guard waitpid(processID, &status, WNOHANG) == processID else { return nil }
        reapedStatus = status
        return status
    }

    private var hasBeenReaped: Bool { reapedStatus != nil }

    /// Starts `arguments` with an empty signal mask and default dispositions, in a new process
    /// group, standard input from /dev/null and both outputs to `standardError`.
    private static func spawn(_ arguments: [String], environment: [String], standardError: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, standardError, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGUSR1, SIGWINCH] { sigaddset(&stopSignals, signal) }
        posix_spawnattr_setsigdefault(&attributes, &stopSignals)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var processID: pid_t = 0
        let result = posix_spawn(&processID, arguments[0], &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw TestFailure("cannot start \(arguments[0]): \(String(cString: strerror(result)))")
        }
        return processID
    }

    private func waitUntilListening(timeout: TimeInterval = 30) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while !Self.acceptsConnections(port: port) {
            if let status = exitStatus() {
                throw TestFailure(
                    "apache2 exited with status \((status >> 8) & 0xff) before listening on \(port)\n\(diagnostics)")
            }
            guard Date() < deadline else {
                throw TestFailure("apache2 did not listen on \(port) within \(Int(timeout)) s\n\(diagnostics)")
            }
            usleep(20_000)
        }
    }

    private static func acceptsConnections(port: UInt16) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// The base configuration: everything Apache would otherwise take from /etc/apache2 points
    /// into `root`, so that the test neither needs nor touches the system's server.
    private static func configuration(
        root: String, port: UInt16, modules: [String], defines: [String: String], site: String
    ) -> String {
        var lines = [
            "ServerRoot \(root)",
            "DefaultRuntimeDir \(root)/run",
            "PidFile \(root)/run/httpd.pid",
            "Mutex file:\(root)/run default",
            "ErrorLog \(root)/error.log",
            // mod_auth_openidc says at info what it did with each request; other modules at warn.
            modules.contains("auth_openidc") ? "LogLevel warn auth_openidc:info" : "LogLevel warn",
            "Listen 127.0.0.1:\(port)",
            "ServerName localhost",
            "DocumentRoot \(root)/htdocs",
            "<Directory \(root)/htdocs>",
            "    Require all granted",
            "</Directory>",
        ]
        // As root, Apache's workers must switch to a user; as anyone else they stay that user.
        if geteuid() == 0 { lines += ["User www-data", "Group www-data"] }
        for module in ["mpm_event", "authz_core", "authn_core"] + modules {
            lines.append("LoadModule \(module)_module \(moduleDirectory)/mod_\(module).so")
        }
        if modules.contains("mime") { lines.append("TypesConfig /etc/mime.types") }
        for (name, value) in defines.sorted(by: { $0.key < $1.key }) {
            lines.append("Define \(name) \"\(value)\"")
        }
        return lines.joined(separator: "\n") + "\n" + site + "\n"
    }
}
