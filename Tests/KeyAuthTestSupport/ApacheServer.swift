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
/// It runs as a ``ChildProcess`` in a process group of its own, with an empty signal mask:
/// through Foundation's `Process`, Apache inherited a test thread's blocked SIGTERM and never saw
/// its stop, and its workers, orphaned by a killed parent, kept `waitUntilExit` waiting for ever.
/// Stopping signals the whole group, and no worker outlives the parent.
public final class ApacheServer: Sendable {
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
    /// Apache's parent process, the leader of its process group.
    private let process: ChildProcess

    /// The document root.
    public var documentRoot: String { directory.path + "/htdocs" }
    /// The error log, where mod_auth_openidc writes what it did.
    public var errorLogPath: String { directory.path + "/error.log" }

    /// Where Apache writes its process id once its port is bound.
    private var pidPath: String { directory.path + "/run/httpd.pid" }
    /// The site's URL with the host name `localhost`, a different site from `127.0.0.1`: browsers
    /// keep cookies per host name, not per port.
    public var url: String { "http://localhost:\(port)" }

    /// A free loopback port for a server that must know its own URL before it starts (a
    /// redirect URI registered with the provider first), below the ephemeral range
    /// (``LoopbackPorts``).
    public static func freePort() -> UInt16 { LoopbackPorts.freeBelowEphemeralRange() }

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
            let file = root + "/htdocs/" + path
            let parent = (file as NSString).deletingLastPathComponent
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            chmod(parent, 0o755)
            try text.write(toFile: file, atomically: true, encoding: .utf8)
            chmod(file, 0o644)
        }
        let configuration = root + "/httpd.conf"
        try Self.configuration(root: root, port: port, modules: modules, defines: defines, site: site)
            .write(toFile: configuration, atomically: true, encoding: .utf8)

        process = try ChildProcess(
            Self.binary, ["-f", configuration, "-DFOREGROUND"],
            environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"],
            standardOutput: .appending(root + "/stderr"), standardError: .appending(root + "/stderr"),
            grouping: .ownGroup)
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
        process.stop(SIGTERM, grace: 10)
    }

    private func waitUntilListening(timeout: TimeInterval = 30) throws {
        let deadline = Date().addingTimeInterval(timeout)
        // Apache writes its pid file only once it has bound its port: a connection accepted
        // before then may be another test's listener that took the port first.
        while !(FileManager.default.fileExists(atPath: pidPath) && LoopbackPorts.canConnect(port: port)) {
            if let termination = process.termination {
                throw TestFailure("apache2 ended (\(termination)) before listening on \(port)\n\(diagnostics)")
            }
            guard Date() < deadline, !Task.isCancelled else {
                throw TestFailure("apache2 did not listen on \(port) within \(Int(timeout)) s\n\(diagnostics)")
            }
            usleep(20_000)
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
            "PidFile \(root)/run/httpd.pid",  // read as pidPath
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
