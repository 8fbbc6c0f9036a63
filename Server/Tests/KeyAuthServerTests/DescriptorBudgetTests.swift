import Foundation
import Glibc
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// The open-file limit `serve` sets at start: every connection `--max-connections` allows must fit
    /// beside the server's own descriptors, because a process out of descriptors is stopped by
    /// libdispatch (Benchmarks/flood measured it at the default limits and a soft limit of 1024).
    ///
    /// Nested in ``StorageContractTests`` (serialized), like the other suites that wait synchronously
    /// on server processes for many seconds.
    @Suite("The open-file limit fits the connection limit", .timeLimit(.minutes(10)))
    struct DescriptorBudgetTests {
        @Test("a soft limit below what serving needs is raised to it, when the hard limit allows")
        func plans() {
            // A systemd service or a shell: soft 1024, hard 524288; 1000 + 64 + 256 = 1320.
            #expect(
                DescriptorBudget.plan(soft: 1024, hard: 524_288, connections: 1000, metricsConnections: 64)
                    == .raise(from: 1024, to: 1320))
            #expect(
                DescriptorBudget.plan(soft: 65536, hard: 65536, connections: 1000, metricsConnections: 64) == .enough)
            #expect(DescriptorBudget.plan(soft: 1320, hard: 1320, connections: 1000, metricsConnections: 64) == .enough)
            // Hard 1024 too: the connections shrink to what fits, 1024 - 64 - 256.
            #expect(
                DescriptorBudget.plan(soft: 1024, hard: 1024, connections: 1000, metricsConnections: 64)
                    == .shrink(from: 1024, to: 1024, connections: 704))
            #expect(
                DescriptorBudget.plan(soft: 256, hard: 320, connections: 1000, metricsConnections: 64)
                    == .refuse(hard: 320)
            )
            #expect(
                DescriptorBudget.plan(soft: 256, hard: 321, connections: 1000, metricsConnections: 64)
                    == .shrink(from: 256, to: 321, connections: 1))
            // Past 32 worker threads, 3 descriptors more for each: 1000 + 64 + 256 + 3 x 224.
            #expect(
                DescriptorBudget.plan(
                    soft: 1024, hard: 524_288, connections: 1000, metricsConnections: 64, threads: 256)
                    == .raise(from: 1024, to: 1992))
            #expect(
                DescriptorBudget.plan(soft: 1320, hard: 1320, connections: 1000, metricsConnections: 64, threads: 256)
                    == .shrink(from: 1320, to: 1320, connections: 328))
        }

        /// The descriptors `pid` has open.
        private static func openDescriptors(_ pid: pid_t) -> Int {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
        }

        /// The soft open-file limit of `pid` (`Max open files` in its `/proc` limits).
        private static func softOpenFileLimit(_ pid: pid_t) -> Int? {
            let limits = (try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)) ?? ""
            let line = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }
            return line.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true)[3]) }
        }

        @Test("a soft limit of 128 for 120 connections is raised, and a flood of every slot leaves descriptors")
        func floodDoesNotExhaustDescriptors() throws {
            let directory = TemporaryDirectory("keyauth-descriptors")
            defer { directory.remove() }
            let server = try KeyAuthServerProcess(
                name: "descriptors",
                arguments: [
                    "serve", "--listen", "127.0.0.1:0", "--db", directory.path + "/server.db", "--quiet",
                    "--metrics-listen", "off", "--max-connections", "120", "--threads", "2",
                ], logPath: directory.path + "/server.log", ulimit: "-Sn 128")
            try server.waitUntilListening()
            defer { server.terminate() }
            #expect(
                server.logEventuallyContains(
                    "raised the open-file limit (RLIMIT_NOFILE) from 128 to 376: 120 connections and 256"),
                "\(server.log)")
            let soft = try #require(Self.softOpenFileLimit(server.processID))
            #expect(soft == 376)

            // 40 addresses, 4 connections each (their fair share): 160 for 120 slots. Before the fix
            // the server's 27 or so own descriptors and 120 connections did not fit in 128.
            var flood: [RawHTTPConnection] = []
            for index in 0..<160 {
                flood.append(try RawHTTPConnection(port: server.port, sourceAddress: "127.0.2.\(1 + index / 4)"))
            }
            // Until the count reaches the slots and stops growing (or 30 s): the server accepts
            // what fits, and a loaded machine may leave it a second without a turn.
            var most = 0
            let deadline = Date().addingTimeInterval(30)
            var steady = 0
            while Date() < deadline, steady < 20 || most < 120 {
                let now = Self.openDescriptors(server.processID)
                steady = now > most ? 0 : steady + 1
                most = max(most, now)
                usleep(50_000)
            }
            #expect(most >= 120, "the flood should fill the slots: \(most) descriptors")
            #expect(most < soft, "the descriptors ran out: \(most) of \(soft)")
            flood.removeAll()

            let check = try RawHTTPConnection(port: server.port, timeoutSeconds: 20)
            try check.send(RawHTTPConnection.requestBytes(method: "GET", path: "/healthz"))
            #expect(try check.readResponse().status == 200, "\(server.log)")
            #expect(server.isRunning)
        }

        @Test("a hard limit too low shrinks the connections with a warning; one lower still refuses to start")
        func hardLimit() throws {
            let directory = TemporaryDirectory("keyauth-descriptors")
            defer { directory.remove() }
            let arguments = [
                "serve", "--listen", "127.0.0.1:0", "--db", directory.path + "/server.db", "--quiet",
                "--metrics-listen",
                "off",
            ]
            let shrunk = try KeyAuthServerProcess(
                name: "shrunk", arguments: arguments, logPath: directory.path + "/shrunk.log", ulimit: "-n 500")
            try shrunk.waitUntilListening()
            #expect(
                shrunk.logEventuallyContains(
                    "warning: the open-file limit (RLIMIT_NOFILE) is 500, at most 500: serving at most 244 connections "
                        + "instead of --max-connections 1000; raise the hard limit to 1256"), "\(shrunk.log)")
            #expect(shrunk.terminate() == 0)

            let refused = try KeyAuthServerProcess(
                name: "refused", arguments: arguments, logPath: directory.path + "/refused.log", ulimit: "-n 200")
            #expect(refused.waitUntilExit() == 69)
            #expect(
                refused.log.contains("cannot start: the open-file limit (RLIMIT_NOFILE) is at most 200"),
                "\(refused.log)")
        }
    }
}
