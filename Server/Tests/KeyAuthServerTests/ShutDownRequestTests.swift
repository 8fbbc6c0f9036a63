import Dispatch
import Foundation
import Glibc
import Synchronization
import Testing

@testable import KeyAuthServer

/// A connection the registry shuts down (its request deadline, its address's share, room for a
/// newcomer) while its request arrives: the request is either answered or never acted on.
///
/// The registry picks a connection because it owes a request, and shuts its socket down. If the
/// request had come in meanwhile, the worker used to answer it into the shut socket: a login used
/// up its assertion while the client saw only a reset.
@Suite("Requests of connections the server shuts down", .timeLimit(.minutes(10)))
struct ShutDownRequestTests {
    @Test("the registry's claim and the request's arrival exclude each other, in either order")
    func claimAndArrival() {
        let claimedFirst = TrackedConnection(descriptor: -1, clientAddress: "127.0.0.1", peer: nil, now: 1_000)
        #expect(claimedFirst.claimShutdown(owedSince: 1_000))
        #expect(!claimedFirst.requestReceived())
        // Whatever ends the cut request, the connection stays shut down.
        claimedFirst.requestEnded(now: 2_000)
        #expect(claimedFirst.owesRequestSince == nil)
        #expect(!claimedFirst.requestReceived())
        #expect(!claimedFirst.claimShutdown(owedSince: 2_000))

        let receivedFirst = TrackedConnection(descriptor: -1, clientAddress: "127.0.0.1", peer: nil, now: 1_000)
        #expect(receivedFirst.requestReceived())
        #expect(!receivedFirst.claimShutdown(owedSince: 1_000))
        // Answered and idle again: a claim must name the new reading, not the one before.
        receivedFirst.requestEnded(now: 3_000)
        #expect(!receivedFirst.claimShutdown(owedSince: 1_000))
        #expect(receivedFirst.claimShutdown(owedSince: 3_000))
    }

    @Test("racing on two threads, exactly one of the claim and the arrival wins every time")
    func raceOnTwoThreads() async throws {
        let rounds = 2_000
        let outcomes = try await DedicatedThreadExecutor.run("claim-race") { () -> (both: Int, neither: Int) in
            var both = 0
            var neither = 0
            for _ in 0..<rounds {
                let connection = TrackedConnection(descriptor: -1, clientAddress: "127.0.0.1", peer: nil, now: 7)
                let start = DispatchSemaphore(value: 0)
                let done = DispatchSemaphore(value: 0)
                let claimed = Atomic<Bool>(false)
                Thread {
                    start.wait()
                    claimed.store(connection.claimShutdown(owedSince: 7), ordering: .relaxed)
                    done.signal()
                }.start()
                start.signal()
                let received = connection.requestReceived()
                // Blocks until the claimer has run: a wait, not a spin, so a busy machine is not
                // made busier.
                done.wait()
                let claimedIt = claimed.load(ordering: .relaxed)
                if received && claimedIt { both += 1 }
                if !received && !claimedIt { neither += 1 }
            }
            return (both, neither)
        }
        #expect(outcomes.both == 0)
        #expect(outcomes.neither == 0)
    }

    /// One worker thread. Connections A and B each send all of a request but its last byte. A
    /// third connection's request holds the worker for 200 ms, and meanwhile the last bytes of A
    /// and then B arrive, so that the worker's next wake-up finds both requests complete. A's
    /// answer then holds the worker for seconds while B, as far as the registry knows, still owes
    /// its request, and B's deadline (3 s) passes: the sweep shuts B down. When the worker is
    /// free again, it reads B's request from the socket's buffer. The scenario runs three times.
    @Test("a request read from a connection already shut down past its deadline is not acted on")
    func requestReadAfterShutdown() async throws {
        try await DedicatedThreadExecutor.run("shut-down-request") {
            let responder = GateResponder()
            var options = HTTPServerOptions(address: .loopback(port: 0))
            options.threadPoolSize = 1
            // Long enough that A, which finishes its request after the /pause round trip, is never
            // swept on a loaded machine; B waits for the sweep, however long it takes.
            options.requestTimeoutSeconds = 3
            let server = try HTTPServer(responder: responder, options: options)
            defer { server.stop() }

            var shutDownBefore = 0
            for _ in 0..<3 {
                let busy = try RawHTTPConnection(port: server.port)
                let late = try RawHTTPConnection(port: server.port)
                let blockRequest = RawHTTPConnection.requestBytes(method: "GET", path: "/block")
                let actRequest = RawHTTPConnection.requestBytes(method: "POST", path: "/act")
                let pause = try RawHTTPConnection(port: server.port)
                try busy.send(Array(blockRequest.dropLast()))
                try late.send(Array(actRequest.dropLast()))
                usleep(100_000)
                try pause.send(RawHTTPConnection.requestBytes(method: "GET", path: "/pause"))
                #expect(responder.paused.wait(timeout: .now() + 30) == .success, "the worker never took /pause")
                try busy.send(Array(blockRequest.suffix(1)))
                try late.send(Array(actRequest.suffix(1)))
                #expect(try pause.readResponse().status == 200)
                #expect(responder.entered.wait(timeout: .now() + 30) == .success, "the worker never took /block")
                #expect(eventually { server.connectionFigures.shutDownPastDeadline > shutDownBefore })
                shutDownBefore = server.connectionFigures.shutDownPastDeadline
                responder.gate.signal()
                #expect(try busy.readResponse().status == 200)
                #expect(late.isClosedByServer(waitingMilliseconds: 5000))
            }
            let actedOn = responder.actedOn.load(ordering: .relaxed)
            #expect(actedOn == 0, "the request of a connection already shut down was acted on")

            // The server goes on: a new connection's request is answered and acted on.
            let next = try RawHTTPConnection(port: server.port)
            try next.send(RawHTTPConnection.requestBytes(method: "POST", path: "/act"))
            #expect(try next.readResponse().status == 200)
            #expect(responder.actedOn.load(ordering: .relaxed) == 1)
        }
    }

}

/// Holds `/block` until the gate opens (up to 10 s) and `/pause` for 200 ms; counts every other
/// request it acts on.
private final class GateResponder: HTTPResponder {
    let entered = DispatchSemaphore(value: 0)
    let paused = DispatchSemaphore(value: 0)
    let gate = DispatchSemaphore(value: 0)
    let actedOn = Atomic<Int>(0)

    func respond(to request: HTTPRequest) -> HTTPResponse {
        if request.path == "/pause" {
            paused.signal()
            usleep(200_000)
            return .text("paused")
        }
        if request.path == "/block" {
            entered.signal()
            _ = gate.wait(timeout: .now() + 10)
            return .text("released")
        }
        actedOn.add(1, ordering: .relaxed)
        return .text("acted")
    }
}
