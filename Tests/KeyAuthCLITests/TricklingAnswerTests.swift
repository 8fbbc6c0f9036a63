import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// A server that answers a byte at a time must not hold a client past its timeout: the timeout
/// bounds the whole exchange, not only the time between two reads. And an answer that is not
/// HTTP is named as such. With the built `keyauth`, in a process of its own, as the audit ran it.
@Suite("A slow or broken answer and the built keyauth", .timeLimit(.minutes(10)))
struct TricklingAnswerTests {
    @Test("an answer sent a byte every 200 ms fails as timed out after KEYAUTH_TIMEOUT")
    func trickle() throws {
        let message = try failure(of: TricklingServer(), timeout: "1")
        #expect(message.contains("did not answer within 1 s"), "\(message)")
    }

    @Test("an answer cut off in its body is a transport failure saying so")
    func cutOff() throws {
        let server = try TricklingServer(
            head: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"access", trickle: false)
        let message = try failure(of: server, timeout: "5")
        #expect(message.contains("broke off") || message.contains("was lost"), "\(message)")
    }

    @Test("an answer that is not HTTP is a transport failure saying so")
    func notHTTP() throws {
        let message = try failure(
            of: TricklingServer(head: "SSH-2.0-OpenSSH_9.2\r\n\r\n", trickle: false), timeout: "5")
        #expect(message.contains("did not answer with HTTP"), "\(message)")
    }

    /// FoundationNetworking, which the client used before libcurl's easy interface, woke about
    /// 4,000 times a second while it waited for an answer: 2.5 to 3.5 s of CPU in a 4 s wait. A
    /// client that sleeps in `poll(2)` uses a small fraction of that, whatever the machine's load,
    /// since this counts CPU time, not time passed.
    @Test("a client waiting for a silent server sleeps: its CPU time stays far below the wait")
    func silentServer() throws {
        let server = try TricklingServer(head: "", trickle: false, holdsSilently: true)
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        let machine = try Machine.withStoredAccount(server: url)
        defer { machine.home.remove() }
        // `times` prints the shell's own CPU time, then its children's: keyauth's alone.
        let result = try runProcess(
            "/bin/sh", ["-c", "\"$0\" \"$@\"; status=$?; times; exit $status", Binaries.keyauth, "login"],
            environment: machine.environment.merging(["KEYAUTH_TIMEOUT": "4"]) { $1 }, timeout: 60)
        #expect(result.status == 69, "\(result.standardError)")
        #expect(result.standardError.contains("did not answer within 4 s"), "\(result.standardError)")
        let children = result.standardOutput.split(separator: "\n").last.map(String.init) ?? ""
        let seconds = Self.cpuSeconds(children)
        #expect(seconds.map { $0 < 1.2 } == true, "keyauth used \(children) of CPU while it waited")
    }

    /// Plain http is allowed to a loopback server only because it never leaves the machine; a
    /// proxy from the environment would carry the assertion and tokens elsewhere.
    @Test("a loopback server is reached directly, whatever http_proxy and all_proxy say")
    func loopbackIgnoresProxy() throws {
        let server = try TricklingServer(head: "SSH-2.0-OpenSSH_9.2\r\n\r\n", trickle: false)
        defer { server.stop() }
        let closed = ClosedPort()
        let proxy = "http://127.0.0.1:\(closed.port)"
        let machine = Machine()
        defer { machine.home.remove() }
        let result = try machine.run(
            ["register", "--server", "http://127.0.0.1:\(server.port)", "--user", "direct", "--presence", "none"],
            extraEnvironment: ["http_proxy": proxy, "HTTP_PROXY": proxy, "all_proxy": proxy, "ALL_PROXY": proxy],
            timeout: 60)
        // Through the (closed) proxy it would be a refused connection; directly, the server's
        // answer that is not HTTP.
        #expect(result.status == 69, "\(result.standardError)")
        #expect(result.standardError.contains("did not answer with HTTP"), "\(result.standardError)")
    }

    /// The sum of a `times` line's two durations, `0m0.120s 0m0.030s`.
    private static func cpuSeconds(_ line: String) -> Double? {
        let parts = line.split(separator: " ")
        guard parts.count == 2 else { return nil }
        var total = 0.0
        for part in parts {
            guard part.hasSuffix("s"), let m = part.firstIndex(of: "m"),
                let minutes = Double(part[..<m]),
                let seconds = Double(part[part.index(after: m)..<part.index(before: part.endIndex)])
            else { return nil }
            total += minutes * 60 + seconds
        }
        return total
    }

    /// The error line of `keyauth register` against `server` (its first request meets it), which
    /// must end with exit 69 (the server cannot be used).
    private func failure(of server: TricklingServer, timeout: String) throws -> String {
        defer { server.stop() }
        let machine = Machine()
        defer { machine.home.remove() }
        let result = try machine.run(
            ["register", "--server", "http://127.0.0.1:\(server.port)", "--user", "slow", "--presence", "none"],
            extraEnvironment: ["KEYAUTH_TIMEOUT": timeout], timeout: 60)
        #expect(result.status == 69, "\(result.standardError)")
        return result.standardError
    }
}

/// Accepts one connection, reads the request, sends `head` (by default one that announces
/// 100,000 bytes), then with `trickle` a space every 200 ms, for at most 30 s or until the
/// client goes; with `holdsSilently` it sends nothing more and keeps the connection open as long.
private final class TricklingServer: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let head: String
    private let trickle: Bool
    private let holdsSilently: Bool
    private let state = Mutex((isListening: true, isStopped: false))

    init(
        head: String = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
        trickle: Bool = true, holdsSilently: Bool = false
    ) throws {
        self.head = head
        self.trickle = trickle
        self.holdsSilently = holdsSilently
        guard let (listener, port) = loopbackListener() else { throw POSIXError(.EADDRINUSE) }
        self.port = port
        self.listener = listener
        let thread = Thread { [self] in serve() }
        thread.start()
    }

    /// Ends the wait for a connection, if it still goes on; the listener is closed by the thread
    /// that owns it, under the lock, so that no call here reaches a descriptor number that
    /// another test's socket took since.
    func stop() {
        state.withLock { state in
            state.isStopped = true
            if state.isListening { shutdown(listener, Int32(SHUT_RDWR)) }
        }
    }

    private func serve() {
        let connection = accept(listener, nil, nil)
        state.withLock { state in
            state.isListening = false
            close(listener)
        }
        guard connection >= 0 else { return }
        defer { close(connection) }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        _ = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
        guard send(Array(head.utf8), to: connection), trickle || holdsSilently else { return }
        for _ in 0..<150 {
            if state.withLock({ $0.isStopped }) { return }
            usleep(200_000)
            guard holdsSilently || send([UInt8(ascii: " ")], to: connection) else { return }
        }
    }

    private func send(_ bytes: [UInt8], to connection: Int32) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }
}
