import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// An administrator's first hour often starts with a failed start. Each way `serve` can fail to
/// start, run for real against the built binary: one line that says what is wrong and what to
/// do, the documented exit status, and nothing left half-made (no new database file, an existing
/// one unchanged).
@Suite("serve fails well at start", .timeLimit(.minutes(10)))
struct ServeStartTests {
    /// Whether tests may run the server as `nobody` (root, with runuser).
    static let canSwitchUser = ServerFilesTests.canSwitchUser

    @Test("a port in use stops serve with exit 69 naming it, what to do, and the option to change")
    func portInUse() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let first = try KeyAuthServerProcess.started(
            name: "first", database: directory.path + "/first.db", in: directory.path)
        defer { first.terminate() }
        let port = first.port
        let inUse =
            "another process listens on port \(port) (`ss -ltnp 'sport = :\(port)'` shows which); stop it, or pass"
        let run = try Self.serve(["--db", directory.path + "/new.db"], listen: "127.0.0.1:\(port)")
        #expect(run.status == 69, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: cannot listen on 127.0.0.1:\(port): \(inUse) --listen HOST:PORT with a free port\n")
        let metrics = try Self.serve(["--db", directory.path + "/new.db", "--metrics-listen", "127.0.0.1:\(port)"])
        #expect(metrics.status == 69, "\(metrics.error)")
        #expect(
            metrics.error
                == "keyauth-server: cannot listen on 127.0.0.1:\(port) for metrics: \(inUse) --metrics-listen HOST:PORT "
                + "with a free port, or --metrics-listen off\n")
    }

    @Test("an address this machine does not have is named as such, exit 69", arguments: ["192.0.2.1", "[2001:db8::1]"])
    func addressNotHere(host: String) throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        let run = try Self.serve(["--db", directory.path + "/ka.db"], listen: host + ":8088")
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let all = host.hasPrefix("[") ? "[::]:8088" : "0.0.0.0:8088"
        #expect(run.status == 69, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: cannot listen on \(host):8088: \(bare) is not an address of this machine "
                + "(`ip -brief address` lists them); pass --listen with one of them, or \(all) for all\n")
    }

    /// The first port an unprivileged process may bind (1024 unless the machine lowered it).
    static let unprivilegedPortStart =
        (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding: .utf8))
        .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 1024

    @Test(
        "port 80 as a user without CAP_NET_BIND_SERVICE says so, exit 69",
        .enabled(if: canSwitchUser && unprivilegedPortStart > 80))
    func privilegedPort() throws {
        let directory = TemporaryDirectory("keyauth-start")
        defer { directory.remove() }
        #expect(chown(directory.path, 65534, 65534) == 0)
        let run = try Self.serve(["--db", directory.path + "/ka.db"], listen: "127.0.0.1:80", wrappedIn: Self.asNobody)
        #expect(run.status == 69, "\(run.error)")
        #expect(
            run.error
                == "keyauth-server: cannot listen on 127.0.0.1:80: a port below 1024 needs root or the capability "
                + "CAP_NET_BIND_SERVICE; pass --listen with a port from 1024 (behind a reverse proxy, docs/SERVER.md), "
                + "or grant the capability\n")
    }

    // MARK: Helpers

    /// `runuser -u nobody --`: the command as the unprivileged user.
    static let asNobody = ["/usr/sbin/runuser", "-u", "nobody", "--"]

    /// Runs `keyauth-server serve` on `listen` with no request log and no settings file, to its
    /// end, under `wrapper` (``asNobody``, a mount namespace) when given.
    static func serve(_ arguments: [String], listen: String = "127.0.0.1:0", wrappedIn wrapper: [String] = []) throws
        -> (status: Int32, error: String)
    {
        let command = ["serve", "--listen", listen, "--quiet"] + arguments
        guard let program = wrapper.first else {
            let run = try KeyAuthServerProcess.runCommand(command, timeout: 30)
            return (run.status, run.error)
        }
        let run = try runProcess(
            program, Array(wrapper.dropFirst()) + [KeyAuthServerProcess.binary.path] + command,
            environment: KeyAuthServerProcess.environment, timeout: 30)
        return (run.status, run.standardError)
    }
}
