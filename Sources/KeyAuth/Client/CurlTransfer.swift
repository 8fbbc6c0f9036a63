internal import CKeyAuthCurl
import Foundation
import Synchronization

/// One HTTP request as the client sends it: what ``CurlTransfer`` needs, nothing from
/// FoundationNetworking.
struct HTTPRequestSpec: Sendable {
    var method = "GET"
    var url: String
    /// Header fields in the order they are sent.
    var headers: [(name: String, value: String)] = []
    var body: [UInt8]?

    init(method: String = "GET", url: String) {
        self.method = method
        self.url = url
    }

    mutating func setHeader(_ name: String, _ value: String) {
        headers.removeAll { $0.name.lowercased() == name.lowercased() }
        headers.append((name, value))
    }
}

/// One request sent with libcurl's easy interface on the calling thread, which it blocks until
/// the answer is complete, the deadline passes or ``cancel()`` is called.
///
/// Not URLSession: FoundationNetworking in the Swift 6.3 toolchain keeps a write event source
/// armed on the socket while it waits for an answer, and the always-writable socket wakes it
/// about 4,000 times a second, so a client waiting for an answer (a long poll, a sign-in
/// waiting for approval) used 80 to 100% of a core. `curl_easy_perform` sleeps in `poll(2)`.
///
/// It owns its easy handle and header list and frees both when released.
final class CurlTransfer: Sendable {
    /// What came back: the last answer's status, header fields (lower-case names) and body.
    struct Answer: Sendable {
        let status: Int
        let headers: [String: String]
        let body: [UInt8]
    }

    /// Why no answer came: libcurl's code and its message (which names no header or body).
    struct Failure: Error, Sendable {
        let code: CURLcode
        let text: String
        /// The body grew past the limit and the transfer was stopped.
        var tooLarge = false
        /// The errno of a failed connect (`ECONNREFUSED`), else 0.
        var systemError: Int32 = 0
    }

    private struct State {
        var status = 0
        var headers: [String: String] = [:]
        var body: [UInt8] = []
        var tooLarge = false
        var cancelled = false
    }

    /// Header fields kept from an answer, by lower-case name; others are dropped as they come.
    private let keptHeaders: Set<String>
    private let maximumBodySize: Int
    private let state = Mutex(State())

    init(keptHeaders: Set<String>, maximumBodySize: Int) {
        self.keptHeaders = keptHeaders
        self.maximumBodySize = maximumBodySize
    }

    /// libcurl's global state, set up once before the first handle (its lazy set-up in
    /// `curl_easy_init` is not safe from two threads at once in every version).
    private static let globalInit: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    /// Asks the transfer to stop; it ends with `CURLE_ABORTED_BY_CALLBACK` within about a second
    /// (libcurl calls the progress function at least that often while it waits).
    func cancel() {
        state.withLock { $0.cancelled = true }
    }

    /// Sends `request` and reads the answer, bounded by `timeoutMilliseconds` (0: no bound).
    func perform(_ request: HTTPRequestSpec, timeoutMilliseconds: Int) -> Result<Answer, Failure> {
        guard Self.globalInit == CURLE_OK, let handle = curl_easy_init() else {
            return .failure(Failure(code: CURLE_FAILED_INIT, text: "libcurl did not start"))
        }
        defer { curl_easy_cleanup(handle) }
        var list: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(list) }
        // An empty `Expect:` keeps libcurl from waiting for a `100 Continue` before a large body.
        for line in request.headers.map({ "\($0.name): \($0.value)" }) + ["Expect:"] {
            guard let longer = curl_slist_append(list, line) else {
                return .failure(Failure(code: CURLE_OUT_OF_MEMORY, text: "out of memory"))
            }
            list = longer
        }
        var errorText = [CChar](repeating: 0, count: ckeyauth_curl_error_size())
        let context = Unmanaged.passUnretained(self).toOpaque()
        // A NUL after the body, so that even an empty body has an address to hand to libcurl.
        // A POST (or any method but GET) without one sends `Content-Length: 0`, which some
        // proxies insist on.
        let body = (request.body ?? []).map { CChar(bitPattern: $0) } + [0]
        let hasBody = request.body != nil || request.method != "GET"
        // Plain http is allowed to loopback only because it never leaves the machine: no proxy
        // from the environment may carry it elsewhere.
        let bypassProxy: Int32 =
            URLComponents(string: request.url)?.host.map(KeyAuthClient.isLoopbackHost) == true ? 1 : 0
        // A write to a socket the peer closed raises SIGPIPE in the writing thread, which would
        // end the process; blocked here, the write fails with EPIPE and libcurl reports it.
        var pipeSignal = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
        let code = body.withUnsafeBufferPointer { bytes in
            errorText.withUnsafeMutableBufferPointer { errorBuffer in
                let prepared = ckeyauth_curl_prepare(
                    handle, request.url, request.method, hasBody ? bytes.baseAddress : nil, bytes.count - 1, list,
                    timeoutMilliseconds, bypassProxy, curlWriteBody, curlWriteHeader, curlProgress, context,
                    errorBuffer.baseAddress)
                guard prepared == CURLE_OK else { return prepared }
                return withExtendedLifetime(self) { curl_easy_perform(handle) }
            }
        }
        let status = ckeyauth_curl_response_code(handle)
        let systemError = Int32(truncatingIfNeeded: ckeyauth_curl_os_errno(handle))
        return state.withLock { state in
            guard code == CURLE_OK else {
                let text = String(decoding: errorText.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                let message = text.isEmpty ? String(cString: curl_easy_strerror(code)) : text
                return .failure(
                    Failure(code: code, text: message, tooLarge: state.tooLarge, systemError: systemError))
            }
            return .success(Answer(status: Int(status), headers: state.headers, body: state.body))
        }
    }

    fileprivate func appendBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        state.withLock { state in
            guard state.body.count + bytes.count <= maximumBodySize else {
                state.tooLarge = true
                return false
            }
            state.body.append(contentsOf: bytes)
            return true
        }
    }

    /// One header line of an answer. A status line starts a new answer (after `100 Continue`,
    /// say), and forgets the fields of the one before.
    fileprivate func addHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        let line = String(decoding: bytes, as: UTF8.self)
        state.withLock { state in
            if line.hasPrefix("HTTP/") {
                state.headers = [:]
                return
            }
            guard let colon = line.firstIndex(of: ":") else { return }
            let name = line[..<colon].lowercased()
            guard keptHeaders.contains(name) else { return }
            state.headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    fileprivate var isCancelled: Bool { state.withLock { $0.cancelled } }
}

private func transfer(_ context: UnsafeMutableRawPointer?) -> CurlTransfer? {
    context.map { Unmanaged<CurlTransfer>.fromOpaque($0).takeUnretainedValue() }
}

private func curlWriteBody(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    let (length, overflow) = size.multipliedReportingOverflow(by: count)
    guard !overflow, let transfer = transfer(context), let data else { return 0 }
    return transfer.appendBody(UnsafeRawBufferPointer(start: data, count: length)) ? length : 0
}

private func curlWriteHeader(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    let (length, overflow) = size.multipliedReportingOverflow(by: count)
    guard !overflow, let transfer = transfer(context), let data else { return 0 }
    transfer.addHeaderLine(UnsafeRawBufferPointer(start: data, count: length))
    return length
}

private func curlProgress(
    _ context: UnsafeMutableRawPointer?, _ downloadTotal: curl_off_t, _ downloaded: curl_off_t,
    _ uploadTotal: curl_off_t, _ uploaded: curl_off_t
) -> Int32 {
    guard let transfer = transfer(context) else { return 1 }
    return transfer.isCancelled ? 1 : 0
}
