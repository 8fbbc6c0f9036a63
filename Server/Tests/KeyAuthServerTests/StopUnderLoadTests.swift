import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// Stopping the server while its workers are busy, many times over. The server used to call
/// `MHD_quiesce_daemon` and close the socket it returned at once. In libmicrohttpd 0.9.75 a worker
/// that wakes at that moment still uses the socket, and quiesce itself races with such a worker
/// over the socket's place in the worker's epoll set; either way the loser aborts the whole
/// process ("Failed to remove listen FD from epoll set"). With epoll_ctl slowed down through
/// LD_PRELOAD, this test aborted that way; the accept policy that replaced quiesce never does.
@Suite("Stopping under load", .timeLimit(.minutes(10)))
struct StopUnderLoadTests {
    /// Four threads that each open a connection, ask `GET /healthz` and read the answer, over and
    /// over, until ``stop()``; an answer other than a whole 200 is counted as malformed. A
    /// connection the stopping server refuses or closes unanswered is fine.
    final class Load: Sendable {
        private let stopping = Atomic<Bool>(false)
        private let malformedCount = Atomic<Int>(0)
        private let group = DispatchGroup()

        init(port: UInt16) {
            for _ in 0..<4 {
                group.enter()
                Thread { [self] in
                    defer { group.leave() }
                    while !stopping.load(ordering: .relaxed) {
                        // A fresh connection each time, so that workers keep accepting.
                        guard let connection = try? RawHTTPConnection(port: port, timeoutSeconds: 5) else {
                            continue
                        }
                        guard (try? connection.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")) != nil else {
                            continue
                        }
                        if let response = try? connection.readResponse(), response.status != 200 {
                            malformedCount.add(1, ordering: .relaxed)
                        }
                    }
                }.start()
            }
        }

        /// Ends the load; returns whether every thread ended within 30 s.
        func stop() -> Bool {
            stopping.store(true, ordering: .relaxed)
            return group.wait(timeout: .now() + 30) == .success
        }

        var malformed: Int { malformedCount.load(ordering: .relaxed) }
    }

    @Test("stopping while clients open connections and send requests never aborts, and every answer is whole")
    func stopWhileBusy() throws {
        let environment = TestEnvironment()
        for _ in 0..<60 {
            let runner = try environment.startServer()
            let port = runner.port
            let load = Load(port: port)
            usleep(UInt32.random(in: 5_000...30_000))
            runner.stop()
            #expect(load.stop())
            #expect(load.malformed == 0)
            #expect(throws: TestFailure.self) { _ = try RawHTTPConnection(port: port) }
        }
    }

    /// Delays every `EPOLL_CTL_DEL` by 300 µs, which widens libmicrohttpd's window from
    /// nanoseconds to something a busy worker falls into on nearly every stop.
    private static let slowEpollRemoval = """
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <sys/epoll.h>
        #include <unistd.h>
        int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event) {
            static int (*real)(int, int, int, struct epoll_event *);
            if (real == 0) real = (int (*)(int, int, int, struct epoll_event *))dlsym(RTLD_NEXT, "epoll_ctl");
            if (op == EPOLL_CTL_DEL) usleep(300);
            return real(epfd, op, fd, event);
        }
        """

    @Test("SIGTERM under load, with epoll_ctl slowed through LD_PRELOAD, ends keyauth-server cleanly every time")
    func terminateWhileBusyWithSlowEpoll() throws {
        let directory = TemporaryDirectory("keyauth-stop-load")
        defer { directory.remove() }
        let library = try PreloadLibrary.compile(Self.slowEpollRemoval, named: "slow-epoll-removal", in: directory.path)
        for round in 0..<12 {
            let server = try KeyAuthServerProcess(
                name: "stop-\(round)", database: directory.path + "/server.db", issuer: "http://127.0.0.1",
                logPath: directory.path + "/server-\(round).log", extraEnvironment: ["LD_PRELOAD": library])
            let port = try server.waitUntilListening()
            let load = Load(port: port)
            usleep(UInt32.random(in: 20_000...60_000))
            let status = server.terminate()
            #expect(load.stop())
            // Before the accept policy, libmicrohttpd aborted here: status 134 (SIGABRT).
            #expect(status == 0, "round \(round): \(server.log)")
            #expect(!server.log.contains("Fatal error"), "round \(round): \(server.log)")
            #expect(load.malformed == 0)
        }
    }
}
