import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The one owner of a `URLSession`, which it invalidates when released so that clients made and
/// dropped by an embedding app do not pile up sessions.
final class HTTPExchange: Sendable {
    /// One answer, read completely.
    struct Reply: Sendable {
        let status: Int
        let body: [UInt8]
        let retryAfter: Int?
    }

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
        session = URLSession(configuration: configuration)
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
    ///   unknown host or a lost connection; `.cancelled` when the task was cancelled.
    func send(_ request: URLRequest, server: String) async throws(KeyAuthError) -> Reply {
        var request = request
        request.timeoutInterval = timeout
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.data(for: request)
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
        let retryAfter = http.value(forHTTPHeaderField: "Retry-After").flatMap { Int($0.trimmingSpaces()) }
        return Reply(status: http.statusCode, body: [UInt8](data), retryAfter: retryAfter)
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
        case .notConnectedToInternet:
            message = "cannot reach the server at \(server): no network connection"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
            message = "the TLS connection to the server at \(server) failed"
        default:
            message = "cannot reach the server at \(server) (URL error \(error.code.rawValue))"
        }
        return KeyAuthError(.transportFailed, message, underlying: error)
    }

    private static func seconds(_ interval: TimeInterval) -> String {
        interval == interval.rounded() ? "\(Int(interval)) s" : "\(interval) s"
    }
}
