import Dispatch
import Glibc
import KeyAuth

extension ServerCommand {
    /// Whether `error` says the signing key (from its file or from storage) cannot be used:
    /// missing, exposed, corrupt or against the key policy. Bad data, not a crash: exit 65.
    private static func isUnusableKey(_ error: KeyAuthError) -> Bool {
        [.keyNotFound, .keyUnprotected, .keyCorrupt, .keyRejected].contains(error.code)
    }

    /// Runs the server until SIGTERM or SIGINT, then shuts down gracefully.
    static func serve(_ configuration: ServerConfiguration, output: Output, log: any ServerLog) -> Int32 {
        // Signals become events on a dispatch source instead of killing the process; SIGPIPE
        // from a peer that hung up must not kill it either.
        signal(SIGPIPE, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let stopRequested = DispatchSemaphore(value: 0)
        let sources = [SIGTERM, SIGINT].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: DispatchQueue.global())
            source.setEventHandler { stopRequested.signal() }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }

        let runner: ServerRunner
        do {
            runner = try ServerRunner(configuration: configuration, log: log)
        } catch let error as StorageError {
            output.error("keyauth-server: \(error.description)\n")
            return exitStatus(for: error)
        } catch let error as HTTPServerError {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.unavailable
        } catch let error as KeyAuthError where Self.isUnusableKey(error) {
            output.error("keyauth-server: \(error.message)\n")
            return ExitStatus.dataError
        } catch {
            output.error("keyauth-server: cannot start: \(error)\n")
            return ExitStatus.failure
        }
        let address = Self.urlHost(runner.server.address)
        // On the same line, so that whoever waits for "listening on" finds the metrics port too.
        let metrics = runner.metricsServer.map { "metrics on http://\(Self.urlHost($0.address)):\($0.port)/metrics" }
        output.error(
            "keyauth-server: listening on http://\(address):\(runner.port) (issuer \(runner.issuer), "
                + "storage \(StorageFactory.isPostgresURL(configuration.database) ? "postgres" : configuration.database), "
                + "enrollment \(configuration.enrollment.rawValue), tokens \(runner.tokenAlgorithm.rawValue)"
                + (configuration.signingKeyFile.map { ", signing key \($0)" } ?? "") + "), "
                + (metrics ?? "metrics off") + "\n")
        if let warning = configuration.openEnrollmentWarning { output.error("keyauth-server: \(warning)\n") }
        if configuration.signingKeyFile != nil, runner.tokenAlgorithm != .rs256 {
            output.error(
                "keyauth-server: warning: the signing key file holds a \(runner.tokenAlgorithm.rawValue) key, and "
                    + "OpenID Connect ID tokens need RS256: /authorize answers server_error until the file "
                    + "holds an RSA key\n")
        }
        stopRequested.wait()
        output.error("keyauth-server: stopping: finishing requests in progress\n")
        runner.stop()
        output.error("keyauth-server: stopped\n")
        return ExitStatus.success
    }

    /// The host of `address` as a URL writes it (IPv6 in brackets).
    private static func urlHost(_ address: ListenAddress) -> String {
        address.isIPv6 ? "[\(address.host)]" : address.host
    }
}
