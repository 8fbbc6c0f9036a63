import KeyAuth
import Synchronization
import Testing

/// The DPoP replay cache an `AccessTokenVerifier` keeps by default.
@Suite("InMemoryDPoPReplayCache")
struct InMemoryDPoPReplayCacheTests {
    /// A clock the test moves by hand.
    private final class Clock: Sendable {
        let seconds = Atomic<Int64>(1_800_000_000)
        var keyAuthClock: KeyAuthClock { KeyAuthClock.seconds { self.seconds.load(ordering: .relaxed) } }
        func advance(_ by: Int64) { seconds.add(by, ordering: .relaxed) }
    }

    @Test("a proof is claimed once until it expires; the same jti of another key is another proof")
    func claimsOnce() throws {
        let clock = Clock()
        let cache = InMemoryDPoPReplayCache(clock: clock.keyAuthClock)
        let expires = clock.seconds.load(ordering: .relaxed) + 60
        #expect(try cache.claim(jwtID: "j1", keyThumbprint: "keyA", expiresAt: expires))
        #expect(try !cache.claim(jwtID: "j1", keyThumbprint: "keyA", expiresAt: expires))
        #expect(try cache.claim(jwtID: "j1", keyThumbprint: "keyB", expiresAt: expires))
        clock.advance(61)
        #expect(try cache.claim(jwtID: "j1", keyThumbprint: "keyA", expiresAt: expires + 61))
        #expect(cache.count == 2)
    }

    @Test("one key filling its share is refused, and every other key's proofs still pass")
    func oneKeyCannotFillTheCache() throws {
        let clock = Clock()
        let cache = InMemoryDPoPReplayCache(capacity: 100, capacityPerKey: 10, clock: clock.keyAuthClock)
        let expires = clock.seconds.load(ordering: .relaxed) + 60
        for index in 0..<10 {
            #expect(try cache.claim(jwtID: "flood-\(index)", keyThumbprint: "attacker", expiresAt: expires))
        }
        #expect(throws: KeyAuthError.self) {
            try cache.claim(jwtID: "flood-10", keyThumbprint: "attacker", expiresAt: expires)
        }
        for user in 0..<9 {
            #expect(try cache.claim(jwtID: "j", keyThumbprint: "user-\(user)", expiresAt: expires))
        }
        // Once the attacker's proofs expire, its share is free again.
        clock.advance(61)
        #expect(try cache.claim(jwtID: "flood-11", keyThumbprint: "attacker", expiresAt: expires + 61))
        #expect(cache.count == 1)
    }

    @Test("a cache full of unexpired proofs of many keys refuses rather than forgets")
    func fullRefuses() throws {
        let clock = Clock()
        let cache = InMemoryDPoPReplayCache(capacity: 20, clock: clock.keyAuthClock)
        #expect(cache.capacityPerKey == 2)
        let expires = clock.seconds.load(ordering: .relaxed) + 60
        for user in 0..<10 {
            for index in 0..<2 {
                #expect(try cache.claim(jwtID: "j\(index)", keyThumbprint: "user-\(user)", expiresAt: expires))
            }
        }
        #expect(throws: KeyAuthError.self) {
            try cache.claim(jwtID: "j", keyThumbprint: "newcomer", expiresAt: expires)
        }
        #expect(try !cache.claim(jwtID: "j0", keyThumbprint: "user-0", expiresAt: expires))
        clock.advance(61)
        #expect(try cache.claim(jwtID: "j", keyThumbprint: "newcomer", expiresAt: expires + 61))
    }
}
