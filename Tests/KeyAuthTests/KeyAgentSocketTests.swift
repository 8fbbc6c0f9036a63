import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The checks a client of `keyauth agent` makes before it sends a byte, on real sockets in this
/// process (the built binary against other users' listeners is `AgentImpostorTests`).
@Suite("keyauth agent's socket: what a client accepts", .timeLimit(.minutes(10)))
struct KeyAgentSocketTests {
    /// The error `KeyAgentSocket.connect(to:)` throws for `path`, nil when it throws none.
    static func refusal(_ path: String) -> KeyAuthError? {
        do {
            if let descriptor = try KeyAgentSocket.connect(to: path) { close(descriptor) }
            return nil
        } catch {
            return error
        }
    }

    @Test("no directory, no socket, or a socket nothing listens on is no agent, not an error")
    func noAgent() throws {
        let runtime = TemporaryDirectory("keyauth-socket")
        defer { runtime.remove() }
        let path = runtime.path + "/keyauth/agent.sock"
        #expect(try KeyAgentSocket.connect(to: path) == nil)
        #expect(mkdir(runtime.path + "/keyauth", 0o700) == 0)
        #expect(try KeyAgentSocket.connect(to: path) == nil)
        // An agent killed with SIGKILL leaves its socket behind.
        close(try KeyAgentSocket.listen(at: path))
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try KeyAgentSocket.connect(to: path) == nil)
        // XDG_RUNTIME_DIR naming a file: nothing can be under it.
        #expect(FileManager.default.createFile(atPath: runtime.path + "/file", contents: nil))
        #expect(try KeyAgentSocket.connect(to: runtime.path + "/file/keyauth/agent.sock") == nil)
    }

    @Test("the user's own listener in a private directory is accepted, and the kernel names it")
    func ownAgent() throws {
        let runtime = TemporaryDirectory("keyauth-socket")
        defer { runtime.remove() }
        let path = runtime.path + "/keyauth/agent.sock"
        try KeyAgentSocket.prepareDirectory(for: path)
        let listener = try KeyAgentSocket.listen(at: path)
        defer { close(listener) }
        let connection = try #require(try KeyAgentSocket.connect(to: path))
        defer { close(connection) }
        let peer = try #require(KeyAgentSocket.peerCredentials(connection))
        #expect(peer.pid == getpid())
        #expect(peer.uid == geteuid())
    }

    @Test("a loose directory, a link, or a file that is not a socket is refused with agent_untrusted")
    func refusals() throws {
        let runtime = TemporaryDirectory("keyauth-socket")
        defer { runtime.remove() }
        let directory = runtime.path + "/keyauth"
        let path = directory + "/agent.sock"
        try KeyAgentSocket.prepareDirectory(for: path)
        let listener = try KeyAgentSocket.listen(at: path)
        defer { close(listener) }

        chmod(directory, 0o755)
        let loose = try #require(Self.refusal(path))
        #expect(loose.code == .agentUntrusted)
        #expect(
            loose.message
                == "refusing the agent at \(path) (nothing was sent to it): \(directory) has group or other permissions (mode 0755), where 0700 is expected"
        )
        chmod(directory, 0o700)
        #expect(Self.refusal(path) == nil)

        let linked = runtime.path + "/linked"
        symlink(directory, linked)
        #expect(
            Self.refusal(linked + "/agent.sock")?.message.hasSuffix("\(linked) is a symbolic link, not a directory")
                == true)
        symlink(path, directory + "/link.sock")
        #expect(Self.refusal(directory + "/link.sock")?.code == .agentUntrusted)
        #expect(Self.refusal(directory + "/link.sock")?.message.hasSuffix("is a symbolic link, not a socket") == true)
        #expect(FileManager.default.createFile(atPath: directory + "/file.sock", contents: nil))
        #expect(
            Self.refusal(directory + "/file.sock")?.message.hasSuffix("\(directory)/file.sock is not a socket") == true)
    }

    @Test("the agent makes its directory 0700, and refuses a loose one without changing it")
    func prepareDirectory() throws {
        let runtime = TemporaryDirectory("keyauth-socket")
        defer { runtime.remove() }
        let directory = runtime.path + "/keyauth"
        try KeyAgentSocket.prepareDirectory(for: directory + "/agent.sock")
        #expect(fileMode(directory) == 0o700)
        chmod(directory, 0o711)
        do {
            try KeyAgentSocket.prepareDirectory(for: directory + "/agent.sock")
            Issue.record("a 0711 directory was accepted")
        } catch {
            #expect(error.code == .agentUntrusted)
            #expect(error.message.contains("cannot start an agent at \(directory)/agent.sock"))
            #expect(error.message.contains("(mode 0711)"))
        }
        #expect(fileMode(directory) == 0o711)
    }

    @Test("without XDG_RUNTIME_DIR, or with a relative one, there is no socket path: no shared fallback")
    func noRuntimeDirectory() throws {
        for environment in [[:], ["XDG_RUNTIME_DIR": ""], ["XDG_RUNTIME_DIR": "run/user/1000"]] {
            do {
                let path = try KeyAgentSocket.path(environment: environment)
                Issue.record("\(environment) gave \(path)")
            } catch {
                #expect(error.code == .invalidArgument)
                #expect(error.message.contains("XDG_RUNTIME_DIR"))
            }
        }
        #expect(
            try KeyAgentSocket.path(environment: ["XDG_RUNTIME_DIR": "/run/user/1000/"])
                == "/run/user/1000/keyauth/agent.sock")
    }
}
