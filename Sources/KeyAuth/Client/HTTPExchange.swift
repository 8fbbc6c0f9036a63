import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The one owner of a `URLSession`, which it invalidates when released so that clients made and
/// dropped by an embedding app do not pile up sessions.
///
/// It follows no redirects: a 3xx answer is an error naming its `Location`, and nothing is sent
/// again. URLSession would otherwise replay the request, `Authorization: Bearer` header and
/// body included, to whatever origin the answer names.
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

    private let session: URLSession
    let timeout: TimeInterval

    init(timeout: TimeInterval) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        session = URLSession(configuration: configuration, delegate: RedirectRefusal(), delegateQueue: nil)
        self.timeout = timeout
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends one request and reads the whole answer.
    ///
    /// - Parameter server: the server's base URL, the only part of the request that an error
    ///   message may show (never a header, a body, or the path's query).
    /// - Throws: `.transportFailed` with its own message for a refused connection, a timeout, an
    ///   unknown host or a lost connection; `.cancelled` when the task was cancelled;
    ///   `.serverRejected` for a redirect (any 3xx), naming its status and `Location`.
    func send(_ request: URLRequest, server: String) async throws(KeyAuthError) -> Reply {
        var request = request
        request.timeoutInterval = timeout
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await exchange(request)
        } catch let error as URLError {
            throw Self.transportError(error, server: server, timeout: timeout)
        } catch is CancellationError {
            throw KeyAuthError(.cancelled, "the request to \(server) was cancelled")
        } catch {
            throw KeyAuthError(.transportFailed, "cannot reach the server at \(server)")
        }
        guard let http = response as? HTTPURLResponse else {
            throw KeyAuthError(.transportFailed, "the server at \(server) did not answer with HTTP")
        }
        guard data.count <= Self.maximumBodySize else {
            throw KeyAuthError(.serverRejected, "the server at \(server) sent an answer larger than 1 MiB")
        }
        guard !(300...399).contains(http.statusCode) else {
            throw Self.redirectError(
                status: http.statusCode, location: http.value(forHTTPHeaderField: "Location"), server: server)
        }
        let retryAfter = http.value(forHTTPHeaderField: "Retry-After").flatMap { Int($0.trimmingSpaces()) }
        var headers: [String: String] = [:]
        for name in Self.keptHeaders {
            if let value = http.value(forHTTPHeaderField: name) { headers[name] = value }
        }
        return Reply(status: http.statusCode, body: [UInt8](data), retryAfter: retryAfter, headers: headers)
    }

    /// Runs `request` as a data task whose completion handler hands over the answer.
    ///
    /// Not `URLSession.data(for:)`: in the Swift 6.3 toolchain's FoundationNetworking its
    /// cancellation handler waits for the session's queue while holding the Swift task's lock,
    /// and that queue, handing over an answer that arrived at that moment, waits for the same
    /// lock (swift-corelibs-foundation issue 5412). Control-C during `keyauth register`'s wait
    /// for approval stopped the process for good that way. Here the completion handler runs on
    /// the session's delegate queue, and a cancel only asks another thread to cancel the task.
    ///
    /// The whole exchange has ``timeout`` seconds: FoundationNetworking's own timeouts limit only
    /// the time between two reads, so a server sending its answer a byte a second held
    /// `keyauth token` (a cron job, the PAM helper) for as long as it liked. At the deadline the
    /// task is cancelled and the request fails as timed out.
    private func exchange(_ request: URLRequest) async throws -> (Data, URLResponse) {
        let pending = PendingDataTask()
        // DispatchTime's arithmetic traps on a non-finite or huge interval: those have no deadline.
        if timeout.isFinite, timeout > 0, timeout < 1e9 {
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { pending.expire() }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = session.dataTask(with: request) { data, response, error in
                    if pending.finish(), error != nil {
                        continuation.resume(throwing: URLError(.timedOut))
                    } else if let error {
                        continuation.resume(throwing: error)
                    } else if let response {
                        continuation.resume(returning: (data ?? Data(), response))
                    } else {
                        continuation.resume(throwing: URLError(.badServerResponse))
                    }
                }
                pending.start(task)
            }
        } onCancel: {
            pending.cancel()
        }
    }

    /// A message per failure that a person can act on, without the request's content.
    static func transportError(_ error: URLError, server: String, timeout: TimeInterval) -> KeyAuthError {
        let message: String
        switch error.code {
        case .cancelled:
            return KeyAuthError(.cancelled, "the request to \(server) was cancelled")
        case .timedOut:
            message = "the server at \(server) did not answer within \(Self.seconds(timeout))"
        case .cannotConnectToHost:
            message = "cannot connect to the server at \(server): connection refused"
        case .cannotFindHost, .dnsLookupFailed:
            message = "cannot find the server host of \(server)"
        case .networkConnectionLost:
            message = "the connection to the server at \(server) was lost"
        case .badServerResponse:
            // FoundationNetworking's name for a connection closed before any answer (-1011).
            message = "the server at \(server) closed the connection without an answer"
        case .unsupportedURL:
            // The URL was checked before it was sent: FoundationNetworking's name for an answer
            // that is not HTTP at all (-1002).
            message = "the server at \(server) did not answer with HTTP"
        case .notConnectedToInternet:
            message = "cannot reach the server at \(server): no network connection"
        case _ where isPlainHTTPAnswer(error, server: server):
            message = "TLS handshake with the server at \(server) failed; is this an http:// server?"
        case .unknown:
            // What FoundationNetworking says of an answer cut off in its body (-1), and of a
            // failed TLS handshake, told apart just above.
            message = "the exchange with the server at \(server) broke off (URL error -1)"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
            message = "the TLS connection to the server at \(server) failed"
        default:
            message = "cannot reach the server at \(server) (URL error \(error.code.rawValue))"
        }
        return KeyAuthError(.transportFailed, message, underlying: error)
    }

    /// Whether a TLS handshake failed the way an `https://` URL to a plain-HTTP server makes it
    /// fail: the server's `HTTP/1.1 400` is read as a TLS record of an unknown version, or, when
    /// the ClientHello holds no line end for the server to answer, the server closes the
    /// connection at its request timeout (`SSL_ERROR_SYSCALL`). FoundationNetworking reports both
    /// as an unknown error carrying OpenSSL's `SSL_connect` text.
    static func isPlainHTTPAnswer(_ error: URLError, server: String) -> Bool {
        guard server.lowercased().hasPrefix("https://") else { return false }
        let text = error.localizedDescription
        return error.code == .secureConnectionFailed || text.contains("wrong version number")
            || text.contains("SSL_connect")
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

/// The data task of one request, and whether the Swift task that waits for it was cancelled,
/// which can happen before the data task exists.
private final class PendingDataTask: Sendable {
    private struct State {
        var cancelled = false
        var expired = false
        var finished = false
        var task: URLSessionDataTask?
    }

    private let state = Mutex(State())

    /// Starts `task`, and cancels it at once when the request was cancelled before it started.
    /// It is resumed before anyone can see it, so that no cancel reaches a task not yet started.
    func start(_ task: URLSessionDataTask) {
        task.resume()
        let cancelled = state.withLock { state in
            state.task = task
            return state.cancelled || state.expired
        }
        if cancelled { Self.cancelElsewhere(task) }
    }

    /// Cancels the data task once it exists; the request then ends with `URLError.cancelled`.
    func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        if let task { Self.cancelElsewhere(task) }
    }

    /// Cancels the data task because its deadline passed, unless it has finished; its failure
    /// then reads as a timeout.
    func expire() {
        let task: URLSessionDataTask? = state.withLock { state in
            guard !state.finished else { return nil }
            state.expired = true
            return state.task
        }
        if let task { Self.cancelElsewhere(task) }
    }

    /// Records that the data task finished, letting it go (the deadline's closure keeps this
    /// object until it fires); returns whether its deadline had passed.
    func finish() -> Bool {
        state.withLock { state in
            state.finished = true
            state.task = nil
            return state.expired
        }
    }

    /// `URLSessionTask.cancel()` waits for the session's queue; a cancellation handler runs with
    /// its Swift task's lock held, so it must not wait for anything (see `HTTPExchange.exchange`).
    private static func cancelElsewhere(_ task: URLSessionDataTask) {
        DispatchQueue.global().async { task.cancel() }
    }
}

/// Answers every redirect with "do not follow", so that URLSession hands back the 3xx itself.
private final class RedirectRefusal: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
