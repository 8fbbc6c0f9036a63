import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// `systemctl stop` (SIGTERM) or Control-C (SIGINT) can come while `serve` is still creating its
    /// database. The start used to end on the spot, or by the signal's default action before
    /// Dispatch had installed its handler, and left the new database half made: a file without
    /// tables, which every admin command then called "still being created", or one without a
    /// signing key; and an existing database marked as after a crash. Run for real against the
    /// built binary, paused inside the start by a preloaded library so that the signal lands there.
    ///
    /// Nested in ``StorageContractTests`` (serialized): each test starts the server many times and
    /// waits synchronously, holding a thread of Swift's cooperative pool for minutes; beside the
    /// other long suites it left a full run's other tests without one.
    @Suite("a stop signal during serve's start", .timeLimit(.minutes(10)))
    struct ServeInterruptedStartTests {
        /// Pauses the process for 2 s in its `PAUSE_AT`-th call of `fdatasync` or `fsync` (SQLite's
        /// journal, its commits, the migration's, the signing key's, the replay marker's), after
        /// creating the file `PAUSE_MARKER`, so that a test knows the start is at that step.
        private static let pauseInSync = """
            #define _GNU_SOURCE
            #include <dlfcn.h>
            #include <fcntl.h>
            #include <stdatomic.h>
            #include <stdlib.h>
            #include <time.h>
            #include <unistd.h>
            static atomic_int calls;
            static void pause_if_chosen(void) {
                const char *at = getenv("PAUSE_AT"), *marker = getenv("PAUSE_MARKER");
                if (at == 0 || marker == 0 || atomic_fetch_add(&calls, 1) + 1 != atoi(at)) return;
                int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                if (fd >= 0) close(fd);
                struct timespec left = {2, 0};
                while (nanosleep(&left, &left) != 0) {}
            }
            int fdatasync(int fd) {
                static int (*real)(int);
                if (real == 0) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
                pause_if_chosen();
                return real(fd);
            }
            int fsync(int fd) {
                static int (*real)(int);
                if (real == 0) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
                pause_if_chosen();
                return real(fd);
            }
            """

        /// A `serve` on `database` with the pause at its `pauseAt`-th sync, SIGTERM once it pauses
        /// there (or once it listens, when the start makes fewer syncs), then its end.
        ///
        /// - Returns: whether it paused before listening, its exit status and its standard error.
        private static func interruptedStart(
            _ database: String, pauseAt: Int, library: String, in probes: String
        ) throws -> (paused: Bool, status: Int32?, log: String) {
            let marker = probes + "/paused-\(pauseAt)"
            let server = try KeyAuthServerProcess(
                name: "start-\(pauseAt)",
                arguments: [
                    "serve", "--listen", "127.0.0.1:0", "--db", database, "--metrics-listen", "off", "--quiet",
                    "--config", "/dev/null", "--signing-key-bits", "2048",
                ], logPath: probes + "/serve-\(pauseAt).log",
                extraEnvironment: ["LD_PRELOAD": library, "PAUSE_AT": "\(pauseAt)", "PAUSE_MARKER": marker])
            let deadline = Date().addingTimeInterval(30)
            while !FileManager.default.fileExists(atPath: marker), !server.log.contains("listening on"),
                server.isRunning, Date() < deadline
            {
                usleep(2_000)
            }
            let paused = FileManager.default.fileExists(atPath: marker) && !server.log.contains("listening on")
            kill(server.processID, SIGTERM)
            return (paused, server.waitUntilExit(timeout: 30), server.log)
        }

        @Test("a new database: the interrupted start removes it at whichever step the signal came, exit 0")
        func newDatabase() throws {
            let probes = TemporaryDirectory("keyauth-interrupt-probes")
            defer { probes.remove() }
            let library = try PreloadLibrary.compile(Self.pauseInSync, named: "pause-in-sync", in: probes.path)
            var pausedRounds = 0
            for pauseAt in 1...12 {
                let directory = TemporaryDirectory("keyauth-interrupt")
                defer { directory.remove() }
                let database = directory.path + "/ka.db"
                let run = try Self.interruptedStart(database, pauseAt: pauseAt, library: library, in: probes.path)
                #expect(run.status == 0, "sync \(pauseAt): \(run.log)")
                // The start makes fewer syncs than that: a plain start and stop.
                guard run.paused else { break }
                pausedRounds += 1
                #expect(
                    run.log
                        == "keyauth-server: stopped before the server started; removed the database \(database) that "
                        + "this start had created\n", "sync \(pauseAt)")
                #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [], "sync \(pauseAt)")
            }
            // The journal of the new file, the migration, the signing key, the replay marker.
            #expect(pausedRounds >= 3)
        }

        @Test("an existing database: the interrupted start leaves it, its replay cache saved as at a clean stop")
        func existingDatabase() throws {
            let probes = TemporaryDirectory("keyauth-interrupt-probes")
            defer { probes.remove() }
            let library = try PreloadLibrary.compile(Self.pauseInSync, named: "pause-in-sync", in: probes.path)
            let template = probes.path + "/template.db"
            let first = try KeyAuthServerProcess.started(name: "first", database: template, in: probes.path)
            #expect(first.terminate() == 0)
            let keys = try KeyAuthServerProcess.runCommand(["keys", "--db", template, "--json"])
            var pausedRounds = 0
            for pauseAt in 1...12 {
                let directory = TemporaryDirectory("keyauth-interrupt")
                defer { directory.remove() }
                let database = directory.path + "/ka.db"
                try FileManager.default.copyItem(atPath: template, toPath: database)
                let run = try Self.interruptedStart(database, pauseAt: pauseAt, library: library, in: probes.path)
                #expect(run.status == 0, "sync \(pauseAt): \(run.log)")
                guard run.paused else { break }
                pausedRounds += 1
                #expect(run.log == "keyauth-server: stopped before the server started\n", "sync \(pauseAt)")
                #expect(
                    try KeyAuthServerProcess.runCommand(["keys", "--db", database, "--json"]).output == keys.output)
                // Not marked as running: the next start would take that for a crash, and refuse
                // every login for its first seconds. (The check marks it so: each round has a copy.)
                let storage = try StorageFactory.open(database)
                defer { storage.close() }
                let horizon = try ReplayGuard.start(mode: .memory, storage: storage, now: ServerClock.now()).horizon
                #expect(horizon == nil, "sync \(pauseAt)")
            }
            // The replay marker's commit, at least, comes before the start ends.
            #expect(pausedRounds >= 5)
        }
    }
}
