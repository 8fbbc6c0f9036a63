import Foundation
import Glibc
import KeyAuth
import KeyAuthServer

/// Where a login's CPU goes inside keyauth-server, HTTP aside: runs `POST /oauth/token` through
/// the server's responder on one thread, as a worker thread does (inside a ``DurabilityScope``,
/// so the thread does not wait for the fsync), and splits its CPU time into the two RSA
/// operations, timed alone on the same thread, and the rest; the group commit's own thread
/// (COMMIT, fdatasync, wake-ups) is reported apart.
///
/// The server runs as `serve` would build it (``ServerRunner``, SQLite file, RSA-2048 signing
/// key, replay cache on); the requests never touch a socket, so the kernel's TCP work and
/// libmicrohttpd are not in these figures. `perf record` on this command gives a profile of the
/// rest without the noise of the network.
struct LoginPathBenchmark {
    let logins: Int
    /// The access tokens' algorithm (`--alg`): RS256, or ES256, whose signature is cheap enough
    /// that the rest of the login dominates.
    var tokenAlgorithm: JWSAlgorithm = .rs256
    /// `--log text|json`: a log line for every login, as `serve` writes by default, sent to
    /// `/dev/null`, so that the line's cost is measured with the write but no disk behind it.
    /// Without it no line is made (`--quiet`).
    var logFormat: LogFormat? = nil

    func run() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "keyauth-login-path-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:0"))
        configuration.database = directory.appendingPathComponent("bench.db").path
        configuration.issuer = "http://keyauth.bench"
        configuration.enrollment = .open
        configuration.logRequests = logFormat != nil
        configuration.logFormat = logFormat ?? .text
        configuration.metricsListener = .off
        configuration.signingKeyBits = 2048
        configuration.tokenAlgorithm = tokenAlgorithm
        configuration.failureLimit = 100_000
        // /dev/null is opened only when lines are written, and stays open until the server stops.
        let discard = logFormat == nil ? -1 : open("/dev/null", O_WRONLY | O_CLOEXEC)
        guard logFormat == nil || discard >= 0 else {
            throw KeyAuthError(.storageFailed, "cannot open /dev/null")
        }
        defer { if discard >= 0 { close(discard) } }
        let log: any ServerLog = discard < 0 ? SilentLog() : StandardErrorLog(descriptor: discard)
        let runner = try ServerRunner(configuration: configuration, log: log)
        defer { runner.stop() }
        let responder = runner.responder

        let key = try RSAPrivateKey.generate(bits: 2048)
        let builder = JWTBuilder(key: key, audience: configuration.issuer ?? "", lifetime: 280)
        let registration: JSONValue = .object([
            "user": "bench", "name": "bench", "public_key": .string(key.publicKey.pemRepresentation),
            "proof": .string(try builder.sign()),
        ])
        let registered = responder.respond(
            to: HTTPRequest(
                method: "POST", path: "/v1/devices", headers: ["Content-Type": "application/json"],
                body: Array(registration.serialized().utf8)))
        guard registered.status == 201 else {
            throw KeyAuthError(.serverRejected, "registration answered \(registered.status)")
        }
        let warmUp = max(logins / 10, 100)
        let requests = try (0..<(logins + warmUp + 1)).map { _ in
            HTTPRequest(
                method: "POST", path: "/oauth/token",
                headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: Array(
                    ("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="
                        + (try builder.sign())).utf8))
        }

        func login(_ request: HTTPRequest) throws {
            let (response, _) = DurabilityScope.run { responder.respond(to: request) }
            guard response.status == 200 else {
                throw KeyAuthError(.serverRejected, "a login answered \(response.status)")
            }
        }
        for request in requests.prefix(warmUp) { try login(request) }
        let processStart = processCPUSeconds()
        let threadStart = threadCPUSeconds()
        let wallStart = ContinuousClock.now
        for request in requests[warmUp..<(warmUp + logins)] { try login(request) }
        let thread = threadCPUSeconds() - threadStart
        let wall = (ContinuousClock.now - wallStart) / .seconds(1)
        // One login outside a scope waits for its batch, and so for every batch before it.
        guard let last = requests.last, responder.respond(to: last).status == 200 else {
            throw KeyAuthError(.serverRejected, "the last login failed")
        }
        let process = processCPUSeconds() - processStart

        // The two signature operations of a login, alone, on this thread: the access token's
        // signature (over a signing input of a token's size) and the assertion's verification.
        let token = try builder.sign(claims: JWTClaims(["cnf": .object(["jkt": .string(key.publicKey.fingerprint)])]))
        let jws = try CompactJWS(parsing: token)
        let tokenKey = try JWSPrivateKey.generate(for: tokenAlgorithm)
        let operations = 2000
        var start = threadCPUSeconds()
        for _ in 0..<operations { _ = try tokenKey.signature(for: jws.signingInput) }
        let sign = (threadCPUSeconds() - start) / Double(operations)
        start = threadCPUSeconds()
        for _ in 0..<operations {
            precondition(jws.isSignatureValid(with: key.publicKey), "benchmark signature must verify")
        }
        let verify = (threadCPUSeconds() - start) / Double(operations)

        let perLogin = thread / Double(logins)
        print(
            "POST /oauth/token through the responder, \(logins) logins on one thread (no sockets), "
                + "\(tokenAlgorithm.rawValue) access tokens")
        print(String(format: "  wall time per login                          %8.1f µs", wall / Double(logins) * 1e6))
        print(String(format: "  CPU per login on the request thread          %8.1f µs", perLogin * 1e6))
        print(
            String(format: "    %@ sign, access token (alone)          %8.1f µs", tokenAlgorithm.rawValue, sign * 1e6))
        print(String(format: "    RSA-2048 verify, assertion (alone)         %8.1f µs", verify * 1e6))
        print(
            String(
                format: "    everything else (parse, JSON, base64, SQLite statements, locks, allocation) %8.1f µs",
                (perLogin - sign - verify) * 1e6))
        print(
            String(
                format: "  CPU per login on other threads (group commit: COMMIT, fdatasync, wake-ups) %8.1f µs",
                (process - thread) / Double(logins + 1) * 1e6))
    }
}

/// CPU seconds the process has used so far, all threads.
func processCPUSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
