import Foundation
import KeyAuth
import KeyAuthFuzzSupport
import KeyAuthServer
import Synchronization

/// Drives keyauth-server's whole HTTP surface in process: every input is one to four requests
/// (``FuzzRequest``) answered by the real ``KeyAuthResponder`` on a real SQLite database, with
/// the server set up the way deployments are: DPoP nonces on, an OpenID Connect relying party
/// (confidential), a public native client, a CIBA client, a registered device with a pending
/// second one, and a signed-in browser session.
///
/// So that mutations reach past the signature checks, an input may name fresh credentials by
/// placeholder (``placeholders``): the harness signs a new device assertion, DPoP proof or
/// approval for each use, and remembers what responses handed out (a code, an `auth_req_id`,
/// a session cookie, a nonce) for the input's next request. The invariants (``check(_:for:)``)
/// are what a request must never do to the server: trap (the process dies, which libFuzzer
/// reports), answer 5xx, put CR or LF in a header, show a stack trace, or write a secret to the
/// log.
public final class ServerFuzzHarness: @unchecked Sendable {
    /// The issuer the server runs under.
    public static let issuer = "http://127.0.0.1:8080"
    /// Requests taken from one input.
    static let maximumRequests = 4
    /// Inputs after which the credentials are made again (tokens live 900 s of the clock, which
    /// advances a second an input).
    static let refreshEvery = 600
    /// Inputs after which the whole server is made again, so the database stays small.
    static let rebuildEvery = 2_000

    private var environment: FuzzEnvironment
    private var inputs = 0
    /// Prints each request's method, path and status to standard error (checking the seeds).
    public var verbose = false
    private let clock: FuzzClock

    /// Sets up the server. Keys are made once per process.
    public init() throws {
        clock = FuzzClock()
        let keys = try FuzzKeys()
        environment = try FuzzEnvironment(keys: keys, clock: clock)
    }

    /// Runs one input and returns the status of each request it made (checking the seeds).
    public func statuses(_ input: [UInt8]) -> [Int] {
        var statuses: [Int] = []
        _ = run(input) { statuses.append($0.status) }
        return statuses
    }

    /// Runs one input and returns the broken invariants (empty when the server behaved).
    public func run(_ input: [UInt8]) -> [String] {
        run(input) { _ in }
    }

    private func run(_ input: [UInt8], observing observe: (HTTPResponse) -> Void) -> [String] {
        inputs += 1
        clock.advance()
        do {
            if inputs % Self.rebuildEvery == 0 {
                environment = try FuzzEnvironment(keys: environment.keys, clock: clock)
            } else if inputs % Self.refreshEvery == 0 {
                try environment.refreshCredentials()
            }
        } catch {
            return ["the harness could not renew its environment: \(error)"]
        }
        var captures = FuzzCaptures()
        var violations: [String] = []
        for part in FuzzRequest.split(input, limit: Self.maximumRequests) {
            let request: FuzzRequest
            let secrets: [String]
            do {
                (request, secrets) = try environment.expand(part, captures: captures)
            } catch {
                // A mutated path no DPoP proof can name, say: the request cannot be made, which
                // says nothing about the server.
                continue
            }
            environment.log.clear()
            let response = environment.responder.respond(to: request.httpRequest)
            observe(response)
            if verbose {
                let error = (try? JSONValue(parsing: response.body))?["error"]?.stringValue ?? ""
                FileHandle.standardError.write(
                    Data("  \(request.method) \(request.path.prefix(60)) -> \(response.status) \(error)\n".utf8))
            }
            violations += Self.check(response, for: request)
            // The method and path are logged by design (query strings and everything else are
            // not), so a secret an input moved there does not count.
            let logged = secrets.filter { !$0.isEmpty && !request.path.contains($0) && !request.method.contains($0) }
            violations += environment.log.lines.compactMap { line in
                logged.first { line.contains($0) }.map { _ in "a secret reached the log: \(line)" }
            }
            captures.record(response)
        }
        return violations
    }

    /// What no response may be, whatever was asked.
    static func check(_ response: HTTPResponse, for request: FuzzRequest) -> [String] {
        var violations: [String] = []
        let summary = "\(request.method) \(request.path.prefix(80))"
        if !(100...499).contains(response.status) {
            let body = String(decoding: response.body.prefix(300), as: UTF8.self)
            violations.append("\(summary) answered \(response.status): \(body)")
        }
        for field in response.headers
        where field.name.contains(where: \.isNewline) || field.value.contains(where: \.isNewline) {
            violations.append("\(summary) answered a header with a line break: \(field.name)")
        }
        let text = String(decoding: response.body, as: UTF8.self)
        for leak in [".swift:", "Fatal error", "Swift runtime failure", "StorageError(", "KeyAuthError("]
        where text.contains(leak) {
            violations.append("\(summary) answered internal detail (\(leak)): \(text.prefix(300))")
        }
        if response.headers["Content-Type"]?.hasPrefix("application/json") == true,
            (try? JSONValue(parsing: response.body)) == nil
        {
            violations.append("\(summary) answered JSON that does not parse")
        }
        return violations
    }
}

/// The clock the server and the harness's signatures share: a fixed start, one second more for
/// every input, so that requests, codes and sessions expire during a run.
final class FuzzClock: Sendable {
    private let seconds = Atomic<Int64>(1_900_000_000)

    var now: Int64 { seconds.load(ordering: .relaxed) }
    var closure: @Sendable () -> Int64 { { [self] in self.now } }
    var keyAuthClock: KeyAuthClock { .seconds { [self] in self.now } }

    func advance() { seconds.add(1, ordering: .relaxed) }
}

/// The device keys, made once per process (RSA generation is the slowest step of a setup).
struct FuzzKeys: Sendable {
    /// The active device of `alice`.
    let device: RSAPrivateKey
    /// A second key of `alice`, registered and left pending.
    let pending: RSAPrivateKey
    /// A key nobody registered, for registrations the input makes.
    let stranger: RSAPrivateKey

    init() throws {
        device = try RSAPrivateKey.generate(bits: 2048)
        pending = try RSAPrivateKey.generate(bits: 2048)
        stranger = try RSAPrivateKey.generate(bits: 2048)
    }
}

/// The log of the server under test: lines kept per request, to look for secrets in them.
final class FuzzLog: ServerLog, @unchecked Sendable {
    private let stored = Mutex<[String]>([])

    func write(line: String) {
        stored.withLock { $0.append(line) }
    }

    var lines: [String] { stored.withLock { $0 } }

    func clear() {
        stored.withLock { $0.removeAll() }
    }
}

extension ServerFuzzHarness {
    /// The files named, with the files of named directories in name order (hidden ones left out).
    public static func inputFiles(_ paths: [String]) throws -> [String] {
        try FuzzInputs.files(paths)
    }
}
