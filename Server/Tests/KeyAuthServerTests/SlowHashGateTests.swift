import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// The server-wide bound on typed recovery codes hashed at once: many addresses sending wrong
/// codes get a busy answer instead of taking every core and worker thread from logins.
@Suite("Slow hash gate", .timeLimit(.minutes(10)))
struct SlowHashGateTests {
    @Test("a full gate refuses at once with busy; a freed slot runs again")
    func refusesWhenFull() throws {
        let gate = SlowHashGate(slots: 1)
        let inner = try gate.run { () -> ServiceError? in
            do {
                _ = try gate.run { 1 }
                return nil
            } catch let error as ServiceError {
                return error
            }
        }
        #expect(inner?.kind == .busy(retryAfter: 1))
        #expect(try gate.run { 2 } == 2)
        // A body that throws gives its slot back too.
        #expect(throws: TestFailure.self) { try gate.run { throw TestFailure("in the body") } }
        #expect(try gate.run { 3 } == 3)
        #expect(throws: ServiceError.self) { try SlowHashGate(slots: 0).run { 4 } }
    }

    @Test("from many threads, no more than its slots run at once, and every caller gets an answer")
    func boundsConcurrency() {
        let gate = SlowHashGate(slots: 2)
        let running = Mutex(0)
        let peak = Mutex(0)
        let refusals = Mutex(0)
        let outcomes = runConcurrently(8) { _ throws(StorageError) -> Bool in
            do {
                try gate.run {
                    let now = running.withLock { count in
                        count += 1
                        return count
                    }
                    peak.withLock { $0 = max($0, now) }
                    // Held until some caller has been refused (not for a fixed time, which a
                    // loaded machine may spend without running any other caller).
                    _ = eventually(within: 10, every: 1_000) { refusals.withLock { $0 > 0 } }
                    running.withLock { $0 -= 1 }
                }
                return true
            } catch {
                refusals.withLock { $0 += 1 }
                return false
            }
        }
        let ran = outcomes.filter { (try? $0.get()) == true }.count
        let refused = outcomes.filter { (try? $0.get()) == false }.count
        #expect(ran + refused == 8)
        #expect(ran >= 1 && refused >= 1)
        #expect(peak.withLock { $0 } <= 2)
    }

    @Test("a recovery registration finding the gate full gets 503 with Retry-After, uses nothing up, counts no failure")
    func busyRegistration() throws {
        let environment = TestEnvironment()
        let (_, codes) = try RecoveryCodeTests.aliceLostHerLaptop(try RecoveryCodeTests.api(environment))
        // The same database, served with every slot taken.
        let api = try environment.directAPI {
            $0.recoveryCodeIterations = 1000
            $0.failureLimit = 3
            $0.slowHashSlots = 0
        }
        let newLaptop = try ServerTestKeys.key("alice-2")
        for _ in 0..<5 {
            let busy = try RecoveryCodeTests.recover(api, key: newLaptop, code: codes[0])
            #expect(busy.status == 503 && busy.errorCode == "temporarily_unavailable")
            #expect(busy.headers["Retry-After"] == "1")
            #expect(busy.errorDescription?.contains("busy") == true)
        }
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 10)
        #expect(try api.storage.device(kid: newLaptop.publicKey.fingerprint) == nil)
        // Five busy answers counted nothing: text that is not a code (refused before any hash)
        // is still answered 403, not 429, until it makes three failures of its own.
        let notACode = (0..<4).map { _ in
            (try? RecoveryCodeTests.recover(api, key: newLaptop, code: "not a code"))?.status
        }
        #expect(notACode == [403, 403, 403, 429])
    }

    @Test("making a set of codes finds the gate full: 503 with Retry-After, and no set is stored")
    func busyMakingCodes() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI {
            $0.recoveryCodeIterations = 1000
            $0.slowHashSlots = 0
        }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        let busy = try RecoveryCodeTests.makeCodes(api, key: laptop, token: token)
        #expect(busy.status == 503 && busy.errorCode == "temporarily_unavailable")
        #expect(busy.headers["Retry-After"] == "1" && busy.json?["codes"] == nil)
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").isEmpty)
    }

    @Test(
        "over sockets: wrong codes from eight addresses that find the gate taken get busy answers while a login goes through"
    )
    func floodOverSockets() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer {
            $0.recoveryCodeIterations = 1000
            $0.slowHashSlots = 1
        }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let bob = try ServerTestKeys.key("bob-1")
        _ = try api.activeDevice(user: "bob", key: bob)
        _ = try RecoveryCodeTests.aliceLostHerLaptop(api)
        let thieves = try (0..<8).map { try ServerTestKeys.key("thief-\($0)") }
        @Sendable func thief(_ index: Int) -> TestAPI {
            TestAPI(
                transport: SocketTransport(port: runner.port, sourceAddress: "127.0.0.\(10 + index)"),
                issuer: runner.issuer, clock: environment.clock, storage: runner.storage)
        }

        // The one slot taken, as another request's long hash takes it. (Timing real hashes so
        // that they overlap depends on how the machine schedules the server's threads.)
        let gate = runner.responder.service.recoveryCodes.gate
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let left = DispatchSemaphore(value: 0)
        Thread {
            _ = try? gate.run {
                entered.signal()
                release.wait()
            }
            left.signal()
        }.start()
        var released = false
        defer { if !released { release.signal() } }
        try #require(entered.wait(timeout: .now() + 30) == .success)

        let statuses = runConcurrently(9) { index throws(StorageError) -> Int in
            do {
                if index == 8 { return try api.login(bob).status }
                return try RecoveryCodeTests.recover(
                    thief(index), key: thieves[index], code: "AAAA-BBBB-CCCC-DDDD-EEEE"
                )
                .status
            } catch {
                return -1
            }
        }.map { (try? $0.get()) ?? -1 }
        #expect(statuses[8] == 200)
        #expect(statuses[0..<8].allSatisfy { $0 == 503 }, "\(statuses)")
        release.signal()
        released = true
        // The slot is free only once the holder has left the gate, not when it is woken.
        try #require(left.wait(timeout: .now() + 30) == .success)

        // With the slot free, a wrong code is checked and refused.
        let checked = try RecoveryCodeTests.recover(thief(0), key: thieves[0], code: "AAAA-BBBB-CCCC-DDDD-EEEE")
        #expect(checked.status == 403)
        #expect(try api.storage.unusedRecoveryCodes(user: "alice").count == 10)
    }
}
