import Foundation
import Glibc
import KeyAuth

/// A response as read off the socket.
struct RawHTTPResponse {
    var status: Int
    /// Header names lowercased.
    var headers: [String: String]
    var body: [UInt8]

    var json: JSONValue? { try? JSONValue(parsing: body) }
    var errorCode: String? { json?["error"]?.stringValue }
    var errorDescription: String? { json?["error_description"]?.stringValue }
}

/// A minimal HTTP/1.1 client over a raw TCP socket, so tests can send what real clients never
/// would: bodies cut off mid-way, lying lengths, oversized chunked uploads.
final class RawHTTPConnection {
    private let descriptor: Int32
    private var buffer: [UInt8] = []

    /// Connects to 127.0.0.1:`port`, with receive and send timeouts so a test never hangs.
    ///
    /// - Parameter sourceAddress: a loopback address (`127.0.0.77`) to connect from, so that a
    ///   test can be several clients; the kernel's choice (127.0.0.1) when nil.
    /// - Parameter receiveBufferBytes: the socket's receive buffer, set before the connection so
    ///   that it bounds the window the server may fill (a slow reader); the kernel's when nil.
    init(port: UInt16, timeoutSeconds: Int = 10, sourceAddress: String? = nil, receiveBufferBytes: Int32? = nil)
        throws
    {
        // A local until connected: once `descriptor` is set, a throw runs deinit, which would
        // close it a second time, and by then the number may be another thread's socket (seen in
        // CI: a libmicrohttpd daemon's descriptor closed under it, which aborts the process).
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestFailure("socket() failed") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var receiveBufferBytes {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &receiveBufferBytes, socklen_t(MemoryLayout<Int32>.size))
        }
        if let sourceAddress {
            guard Self.withIPv4Address(sourceAddress, port: 0, { bind(descriptor, $0, $1) }) == 0 else {
                Glibc.close(descriptor)
                throw TestFailure("bind() to \(sourceAddress) failed")
            }
        }
        guard Self.withIPv4Address("127.0.0.1", port: port, { connect(descriptor, $0, $1) }) == 0 else {
            Glibc.close(descriptor)
            throw TestFailure("connect() to port \(port) failed")
        }
        self.descriptor = descriptor
    }

    /// Lends `body` a `sockaddr_in` for `address` and `port`, and its length.
    private static func withIPv4Address(
        _ address: String, port: UInt16, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32
    ) -> Int32 {
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = port.bigEndian
        socketAddress.sin_addr.s_addr = inet_addr(address)
        return withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    deinit {
        Glibc.close(descriptor)
    }

    /// Sends bytes exactly as given.
    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard sent > 0 else { throw TestFailure("send() failed") }
            offset += sent
        }
    }

    /// Sends text exactly as given.
    func send(_ text: String) throws {
        try send(Array(text.utf8))
    }

    /// Half-closes the connection: the server sees the end of the request stream.
    func shutdownWrite() {
        shutdown(descriptor, Int32(SHUT_WR))
    }

    /// Whether the server closed the connection without a byte of answer: the next read ends
    /// the stream or is reset, rather than bringing data or running into the timeout.
    func isClosedUnanswered() -> Bool {
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, 0)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    /// Reads one response (Content-Length framed, as this server always answers).
    func readResponse() throws -> RawHTTPResponse {
        let separator: [UInt8] = [13, 10, 13, 10]
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = Self.find(separator, in: buffer)
            if headerEnd == nil { try fill() }
        }
        guard let headerEnd else { throw TestFailure("no header end") }
        let head = String(decoding: buffer[..<headerEnd], as: UTF8.self)
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        guard !lines.isEmpty else { throw TestFailure("empty response") }
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw TestFailure("bad status line") }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        let bodyStart = headerEnd + separator.count
        while buffer.count < bodyStart + length { try fill() }
        let body = Array(buffer[bodyStart..<(bodyStart + length)])
        buffer.removeFirst(bodyStart + length)
        return RawHTTPResponse(status: status, headers: headers, body: body)
    }

    /// Whether the server closed the connection (a read returns end of file).
    func isClosedByServer() -> Bool {
        var byte: UInt8 = 0
        return recv(descriptor, &byte, 1, 0) == 0
    }

    /// Reads what has arrived, up to `count` bytes, waiting at most `milliseconds` for it: how
    /// many bytes it read (0 when none came), or nil once the server closed or reset the
    /// connection.
    func receiveSome(upTo count: Int, waitingMilliseconds milliseconds: Int32) -> Int? {
        var request = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&request, 1, milliseconds) > 0 else { return 0 }
        var bytes = [UInt8](repeating: 0, count: count)
        let received = recv(descriptor, &bytes, count, 0)
        return received > 0 ? received : nil
    }

    /// Whether the server closed (or reset) the connection within `milliseconds`, without
    /// waiting for the receive timeout when it did not.
    func isClosedByServer(waitingMilliseconds milliseconds: Int32) -> Bool {
        var request = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&request, 1, milliseconds) == 1 else { return false }
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT))
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { throw TestFailure("connection closed or timed out while reading") }
        buffer.append(contentsOf: chunk[..<count])
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if Array(haystack[start..<(start + needle.count)]) == needle { return start }
        }
        return nil
    }

    /// The bytes of a request with `Content-Length`.
    static func requestBytes(
        method: String, path: String, headers: [(String, String)] = [], body: [UInt8] = []
    ) -> [UInt8] {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { text += "Content-Length: \(body.count)\r\n" }
        text += "\r\n"
        return Array(text.utf8) + body
    }
}
