internal import CKeyAuthCurl
import Foundation
import Synchronization

/// Sends the client's requests, one libcurl transfer each (``CurlTransfer``) on a thread of
/// its own, and reads their whole answers.
///
/// It follows no redirects: a 3xx answer is an error naming its `Location`, and nothing is sent
/// again, so no `Authorization: Bearer` header or body is replayed to whatever origin an answer
/// names.
final class HTTPExchange: Sendable {
    /// One answer, read completely.
    struct Reply: Sendable {
        let status: Int
        let body: [UInt8]
        let retryAfter: Int?
        /// The header fields the protocol reads, by lower-case name (`cache-control`,
        /// `dpop-nonce`, `www-authenticate`).
        var headers: [String: String] = [:]
    }

    /// The header fields ``Reply/headers`` keeps.
    static let keptHeaders = ["cache-control", "dpop-nonce", "www-authenticate"]

    /// Answers larger than this are refused: nothing the protocol sends comes close.
    static let maximumBodySize = 1 << 20

    let timeout: TimeInterval

    init(timeout: TimeInterval) {
        self.timeout = timeout
    }

    /// Sends one request and reads the whole answer.
    ///
    /// The whole exchange, connecting included, has ``timeout`` seconds: a server sending its
    /// answer a byte a second cannot hold `keyauth token` (a cron job, the PAM helper) for as
    /// long as it likes.
    ///
    /// - Parameter server: the server's base URL, the only part of the request that an error
    ///   message may show (never a header, a body, or the path's query).
    /// - Throws: `.transportFailed` with its own message for a refused connection, a timeout, an
    ///   unknown host or a lost connection; `.cancelled` when the task was cancelled;
    ///   `.serverRejected` for a redirect (any 3xx), naming its status and `Location`, and for
    ///   an answer over 1 MiB.
    func send(_ request: HTTPRequestSpec, server: String) async throws(KeyAuthError) -> Reply {
        let answer: CurlTransfer.Answer
        switch await exchange(request) {
        case nil:
            throw KeyAuthError(.cancelled, "the request to \(server) was cancelled")
        case .failure(let failure)?:
            throw Self.transportError(failure, server: server, timeout: timeout)
        case .success(let received)?:
            answer = received
        }
        guard answer.status >= 100 else {
            throw KeyAuthError(.transportFailed, "the server at \(server) did not answer with HTTP")
        }
        guard !(300...399).contains(answer.status) else {
            throw Self.redirectError(status: answer.status, location: answer.headers["location"], server: server)
        }
        let retryAfter = answer.headers["retry-after"].flatMap { Int($0.trimmingSpaces()) }
        let headers = answer.headers.filter { Self.keptHeaders.contains($0.key) }
        return Reply(status: answer.status, body: answer.body, retryAfter: retryAfter, headers: headers)
    }

    /// Runs `request` on a thread of its own; nil when the Swift task was cancelled.
    ///
    /// A cancel returns at once; the transfer itself stops within about a second on its thread.
    /// Only when no thread can be made does the transfer run on the caller's thread, and a
    /// cancel then returns when the transfer stops.
    private func exchange(_ request: HTTPRequestSpec) async -> Result<CurlTransfer.Answer, CurlTransfer.Failure>? {
        let transfer = CurlTransfer(
            keptHeaders: Set(Self.keptHeaders + ["retry-after", "location"]), maximumBodySize: Self.maximumBodySize)
        let waiter = TransferWaiter()
        let milliseconds = Self.milliseconds(timeout)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard waiter.wait(continuation) else { return }
                DetachedThread.startOrRunHere(name: "keyauth-http") {
                    waiter.finish(transfer.perform(request, timeoutMilliseconds: milliseconds))
                }
            }
        } onCancel: {
            transfer.cancel()
            waiter.finish(nil)
        }
    }

    /// `timeout` in whole milliseconds for libcurl, rounded up; 0 (no limit) for a timeout that
    /// is not finite, not positive or longer than about 31 years.
    static func milliseconds(_ timeout: TimeInterval) -> Int {
        guard timeout.isFinite, timeout > 0, timeout < 1e9 else { return 0 }
        return Int((timeout * 1000).rounded(.up))
    }

    /// A message per failure that a person can act on, without the request's content.
    static func transportError(_ failure: CurlTransfer.Failure, server: String, timeout: TimeInterval) -> KeyAuthError {
        if failure.tooLarge {
            return KeyAuthError(.serverRejected, "the server at \(server) sent an answer larger than 1 MiB")
        }
        let message: String
        switch failure.code {
        case CURLE_ABORTED_BY_CALLBACK:
            return KeyAuthError(.cancelled, "the request to \(server) was cancelled")
        case CURLE_URL_MALFORMAT:
            return KeyAuthError(.invalidArgument, "cannot form a request URL from \(server)")
        case CURLE_OPERATION_TIMEDOUT:
            message = "the server at \(server) did not answer within \(Self.seconds(timeout))"
        case CURLE_COULDNT_CONNECT where failure.systemError == ECONNREFUSED:
            message = "cannot connect to the server at \(server): connection refused (is it running, on that port?)"
        case CURLE_COULDNT_CONNECT:
            message = "cannot connect to the server at \(server)"
        case CURLE_COULDNT_RESOLVE_HOST:
            message = "cannot find the server host of \(server)"
        case CURLE_GOT_NOTHING:
            message = "the server at \(server) closed the connection without an answer"
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_WEIRD_SERVER_REPLY:
            // libcurl's names for an answer that is not HTTP/1.x (HTTP/0.9 is refused).
            message = "the server at \(server) did not answer with HTTP"
        case CURLE_PARTIAL_FILE:
            message = "the exchange with the server at \(server) broke off in the middle of its answer"
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR:
            message = "the connection to the server at \(server) was lost"
        case _ where isPlainHTTPAnswer(failure, server: server):
            message = "TLS handshake with the server at \(server) failed; is this an http:// server?"
        case CURLE_PEER_FAILED_VERIFICATION:
            message = "the TLS connection to the server at \(server) failed: its certificate is not trusted here"
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
            CURLE_SSL_INVALIDCERTSTATUS:
            message = "the TLS connection to the server at \(server) failed"
        default:
            message = "cannot reach the server at \(server) (libcurl error \(failure.code.rawValue))"
        }
        return KeyAuthError(.transportFailed, message)
    }

    /// Whether a TLS handshake failed the way an `https://` URL to a plain-HTTP server makes it
    /// fail: the server's `HTTP/1.1 400` is read as a TLS record of an unknown version, or, when
    /// the ClientHello holds no line end for the server to answer, the server closes the
    /// connection at its request timeout (`SSL_ERROR_SYSCALL`).
    static func isPlainHTTPAnswer(_ failure: CurlTransfer.Failure, server: String) -> Bool {
        guard server.lowercased().hasPrefix("https://"), failure.code == CURLE_SSL_CONNECT_ERROR else { return false }
        return failure.text.contains("wrong version number") || failure.text.contains("SSL_ERROR_SYSCALL")
            || failure.text.contains("unexpected eof")
    }

    /// The error for a 3xx answer: it names where the server pointed, so that a person can fix a
    /// server URL that moved (http to https, a new path) or see that something sent them away.
    ///
    /// A `Location` that carries something shaped like a token (a server echoing the bearer
    /// token or the assertion into a URL) is withheld, as in ``OAuthError`` descriptions.
    static func redirectError(status: Int, location: String?, server: String) -> KeyAuthError {
        let target: String
        if let location {
            let runs = location.split { character in
                !(character.isASCII && (character.isLetter || character.isNumber || "-_.".contains(character)))
            }
            if runs.contains(where: { OAuthError.looksLikeJWT($0) }) {
                target = "to a Location withheld because it contained a token"
            } else {
                target = "to " + (OAuthError.sanitized(location) ?? "an empty Location")
            }
        } else {
            target = "without a Location"
        }
        return KeyAuthError(
            .serverRejected,
            "the server at \(server) answered \(status), a redirect \(target); keyauth follows no redirects, "
                + "so nothing was sent there: use the final URL as the server URL if you trust it")
    }

    private static func seconds(_ interval: TimeInterval) -> String {
        // Int(_:) traps on infinities and on values past Int's range.
        guard interval.isFinite, abs(interval) < 1e15, interval == interval.rounded() else { return "\(interval) s" }
        return "\(Int(interval)) s"
    }
}

/// The continuation that waits for one transfer: resumed once, by the transfer's end or by a
/// cancel, whichever comes first.
private final class TransferWaiter: Sendable {
    typealias Outcome = Result<CurlTransfer.Answer, CurlTransfer.Failure>?

    private struct State {
        var continuation: CheckedContinuation<Outcome, Never>?
        var done = false
    }

    private let state = Mutex(State())

    /// Keeps `continuation` until the transfer ends; false (and the continuation resumed with
    /// nil) when a cancel came first, so that no transfer starts.
    func wait(_ continuation: CheckedContinuation<Outcome, Never>) -> Bool {
        let waiting = state.withLock { state in
            guard !state.done else { return false }
            state.continuation = continuation
            return true
        }
        if !waiting { continuation.resume(returning: nil) }
        return waiting
    }

    /// Hands `outcome` (nil: cancelled) to the waiting task, unless something came first.
    func finish(_ outcome: Outcome) {
        let continuation = state.withLock { state in
            state.done = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: outcome)
    }
}
