import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The agent's socket as a client meets it: the PIN travels in a frame of its own, and a client
/// that goes away early cannot end the agent.
@Suite("keyauth agent socket", .serialized, .timeLimit(.minutes(10)))
struct AgentSocketTests {
    /// A listener in a private directory that plays the agent for one connection: it keeps the
    /// frames it reads and answers `ok`.
    final class RecordingAgent: @unchecked Sendable {
        let directory = TemporaryDirectory("keyauth-agent-frames")
        var socketPath: String { directory.path + "/keyauth/agent.sock" }
        private let frames = Mutex<[[UInt8]]>([])

        /// Serves one connection on a thread and reads `count` frames from it before answering.
        func serve(frames count: Int) throws -> Thread {
            try KeyAgentSocket.prepareDirectory(for: socketPath)
            let listener = try KeyAgentSocket.listen(at: socketPath)
            let thread = Thread { [self] in
                defer { close(listener) }
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                defer { close(connection) }
                KeyAgentSocket.setTimeout(connection, seconds: 5)
                for _ in 0..<count {
                    guard let frame = KeyAgentSocket.readMessage(connection) else { return }
                    frames.withLock { $0.append(frame) }
                }
                _ = KeyAgentSocket.writeMessage(connection, Array(#"{"ok":true}"#.utf8))
            }
            thread.start()
            return thread
        }

        var received: [[UInt8]] { frames.withLock { $0 } }
    }

    @Test("unlock sends the PIN as its own frame, never inside the JSON")
    func pinTravelsInItsOwnFrame() throws {
        let agent = RecordingAgent()
        defer { agent.directory.remove() }
        _ = try agent.serve(frames: 2)
        let pin = "246813"
        let answer = try KeyAgentSocket.exchange(
            KeyAgentRequest(op: "unlock", timeout: 60), at: agent.socketPath, pin: SecretBytes(Array(pin.utf8)))
        #expect(answer?.ok == true)
        let frames = agent.received
        try #require(frames.count == 2)
        let request = try #require(try JSONSerialization.jsonObject(with: Data(frames[0])) as? [String: Any])
        #expect(request["op"] as? String == "unlock")
        #expect(request["pinFrame"] as? Bool == true)
        #expect(request["pin"] == nil)
        let json = String(decoding: frames[0], as: UTF8.self)
        #expect(!json.contains(pin) && !json.contains(Base64URL.encode(Array(pin.utf8))))
        #expect(frames[1] == Array(pin.utf8))
    }

    @Test("without a PIN, unlock sends one frame and no pinFrame member")
    func noPINNoFrame() throws {
        let agent = RecordingAgent()
        defer { agent.directory.remove() }
        _ = try agent.serve(frames: 1)
        let answer = try KeyAgentSocket.exchange(KeyAgentRequest(op: "unlock"), at: agent.socketPath)
        #expect(answer?.ok == true)
        let frames = agent.received
        try #require(frames.count == 1)
        let request = try #require(try JSONSerialization.jsonObject(with: Data(frames[0])) as? [String: Any])
        #expect(request["pinFrame"] == nil && request["pin"] == nil)
    }

    /// Sends `request` (raw JSON) and, when given, a second frame; closes the write side and
    /// returns the answer, nil when the agent closed without one.
    static func send(_ request: String, then second: [UInt8]? = nil, at path: String) throws -> KeyAgentResponse? {
        guard let descriptor = try KeyAgentSocket.connect(to: path) else { return nil }
        defer { close(descriptor) }
        KeyAgentSocket.setTimeout(descriptor, seconds: 10)
        guard KeyAgentSocket.writeMessage(descriptor, Array(request.utf8)) else { return nil }
        if let second { _ = KeyAgentSocket.writeMessage(descriptor, second) }
        shutdown(descriptor, Int32(SHUT_WR))
        guard let answer = KeyAgentSocket.readMessage(descriptor, deadline: .now + KeyAgentSocket.clientWait)
        else { return nil }
        return try JSONDecoder().decode(KeyAgentResponse.self, from: Data(answer))
    }

    @Test("a running agent refuses a PIN inside the JSON and an unlock whose PIN frame never comes, and keeps running")
    func refusesInlinePIN() throws {
        try AgentTests.withUnlockedAgent { _, agent in
            #expect(try Self.send(#"{"op":"lock"}"#, at: agent.socketPath)?.ok == true)
            let inline = try Self.send(
                #"{"op":"unlock","pin":"\#(Base64URL.encode(Array(AgentTests.pin.utf8)))"}"#, at: agent.socketPath)
            #expect(inline?.ok == false)
            #expect(inline?.error == KeyAuthError.Code.invalidArgument.rawValue)
            #expect(inline?.message?.contains("frame of its own") == true)
            #expect(agent.status()?.locked == true)
            // The PIN frame announced but not sent: the agent closes without trying anything.
            #expect(try Self.send(#"{"op":"unlock","pinFrame":true}"#, at: agent.socketPath) == nil)
            #expect(agent.status()?.locked == true)
            // The right PIN in its frame unlocks it.
            let framed = try Self.send(
                #"{"op":"unlock","pinFrame":true}"#, then: Array(AgentTests.pin.utf8), at: agent.socketPath)
            #expect(framed?.ok == true)
            #expect(agent.status()?.locked == false)
            #expect(agent.process.isRunning)
        }
    }

    @Test("clients that close before the answer, on either socket, do not end the agent")
    func earlyCloseKeepsTheAgent() throws {
        try AgentTests.withUnlockedAgent { _, agent in
            let sshSocket = KeyAgentSocket.sshAgentPath(besides: agent.socketPath)
            for round in 0..<40 {
                guard let descriptor = try KeyAgentSocket.connect(to: agent.socketPath) else {
                    Issue.record("round \(round): the agent stopped answering")
                    return
                }
                _ = KeyAgentSocket.writeMessage(descriptor, Array(#"{"op":"status"}"#.utf8))
                close(descriptor)
                // An ssh-agent identities request (type 11), then gone.
                let ssh = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
                var address = sockaddr_un()
                address.sun_family = sa_family_t(AF_UNIX)
                withUnsafeMutableBytes(of: &address.sun_path) { raw in
                    raw.copyBytes(from: Array(sshSocket.utf8).prefix(raw.count - 1))
                }
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        Glibc.connect(ssh, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                    }
                }
                if connected == 0 { _ = write(ssh, [0, 0, 0, 1, 11], 5) }
                close(ssh)
            }
            // Give the agent time to write its answers into the closed connections.
            Thread.sleep(forTimeInterval: 0.5)
            #expect(agent.process.isRunning)
            #expect(agent.status()?.locked == false)
        }
    }
}
