import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// A tiny HTTP/1.1 responder on a loopback port, for client tests that need real sockets (the
/// real server runs behind it in the command tests, a script where a misbehaving one is needed): each request goes to `handler`, whose answer is sent with
/// `Connection: close`. A nil answer holds the connection open without replying, to test
/// timeouts.
public final class LoopbackHTTPResponder: @unchecked Sendable {
    /// One request as received.
    public struct Request: Sendable {
        /// The method.
        public let method: String
        /// The path, query included.
        public let path: String
        /// Header names in lower case.
        public let headers: [String: String]
        /// The body.
        public let body: [UInt8]

        /// The body as UTF-8 text.
        public var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    /// One answer to send.
    public struct Response: Sendable {
        public var status: Int
        public var headers: [String: String] = [:]
        public var body: [UInt8] = []
        /// Closes the connection after reading the request, without a byte of answer: a reply
        /// lost on the way back, after the server did what was asked.
        public var closesWithoutAnswer = false

        public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        /// No answer at all: the connection is closed once the request was read.
        public static var lost: Response {
            var response = Response(status: 0)
            response.closesWithoutAnswer = true
            return response
        }

        /// A JSON answer.
        public static func json(_ status: Int, _ text: String, headers: [String: String] = [:]) -> Response {
            var all = headers
            all["Content-Type"] = "application/json"
            return Response(status: status, headers: all, body: Array(text.utf8))
        }

        /// An RFC 6749 error answer.
        public static func oauthError(_ status: Int, _ code: String, _ description: String) -> Response {
            // Through JSONValue, so that a description with quotes is still one JSON string.
            json(
                status,
                JSONValue.object(["error": .string(code), "error_description": .string(description)]).serialized())
        }
    }

    /// The bound port.
    public let port: UInt16
    /// The IPv4 address listened on: 127.0.0.1 unless another loopback address was asked for,
    /// which makes a second responder another origin (another host, not just another port).
    public let host: String
    private let listener: Int32
    private let handler: @Sendable (Request) -> Response?
    private let lock = NSLock()
    private var received: [Request] = []
    private var heldConnections: [Int32] = []
    private var stopped = false

    /// `http://HOST:PORT`.
    public var url: String { "http://\(host):\(port)" }

    /// The requests received so far.
    public var requests: [Request] { lock.withLock { received } }

    /// Listens on `host` (an IPv4 loopback address unless a test needs another) at a port the
    /// kernel picks, answering each request with `handler`.
    public init(host: String = "127.0.0.1", handler: @escaping @Sendable (Request) -> Response?) throws {
        self.handler = handler
        self.host = host
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr(host)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(descriptor, 16) == 0 else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        listener = descriptor
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    deinit {
        stop()
    }

    /// Closes the listener and every held connection; later calls do nothing, because the
    /// descriptor numbers may already belong to other sockets of the test process.
    public func stop() {
        let held: [Int32]? = lock.withLock {
            guard !stopped else { return nil }
            stopped = true
            defer { heldConnections = [] }
            return heldConnections
        }
        guard let held else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        for connection in held {
            shutdown(connection, Int32(SHUT_RDWR))
            close(connection)
        }
    }

    private var isStopped: Bool { lock.withLock { stopped } }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                break
            }
            if isStopped {
                close(connection)
                break
            }
            let thread = Thread { [self] in serve(connection) }
            thread.start()
        }
        close(listener)
    }

    private func serve(_ connection: Int32) {
        // A client that connects and sends nothing costs a thread for 30 s, not for ever.
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let request = readRequest(connection) else {
            close(connection)
            return
        }
        lock.withLock { received.append(request) }
        guard let response = handler(request) else {
            lock.withLock { heldConnections.append(connection) }
            return
        }
        if response.closesWithoutAnswer {
            shutdown(connection, Int32(SHUT_RDWR))
            close(connection)
            return
        }
        var head = "HTTP/1.1 \(response.status) Status\r\n"
        var headers = response.headers
        headers["Content-Length"] = String(response.body.count)
        headers["Connection"] = "close"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        DescriptorIO.writeAll(connection, bytes: Array(head.utf8) + response.body)
        shutdown(connection, Int32(SHUT_WR))
        close(connection)
    }

    private func readRequest(_ connection: Int32) -> Request? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var headerEnd: Int?
        while headerEnd == nil {
            let count = Self.readRetrying(connection, &chunk)
            guard count > 0 else { return nil }
            buffer += chunk[0..<count]
            headerEnd = Self.find([13, 10, 13, 10], in: buffer)
        }
        guard let headerEnd else { return nil }
        let headText = String(decoding: buffer[0..<headerEnd], as: UTF8.self)
        var lines = headText.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...]
                .trimmingCharacters(in: .whitespaces)
        }
        var body = Array(buffer[(headerEnd + 4)...])
        let length = headers["content-length"].flatMap { Int($0) } ?? 0
        while body.count < length {
            let count = Self.readRetrying(connection, &chunk)
            guard count > 0 else { break }
            body += chunk[0..<count]
        }
        return Request(
            method: String(requestLine[0]), path: String(requestLine[1]), headers: headers, body: body)
    }

    /// `read(2)` that retries when a signal (SIGCHLD from the processes other tests spawn)
    /// interrupts it, which would otherwise look like a closed connection.
    private static func readRetrying(_ connection: Int32, _ chunk: inout [UInt8]) -> Int {
        while true {
            let count = read(connection, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            return count
        }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where Array(haystack[start..<(start + needle.count)]) == needle
        {
            return start
        }
        return nil
    }
}
