import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

/// The helper's checks of an offline grant, against grants signed here with a server-like key
/// (the end-to-end tests use the real server's grants: OfflineHostLoginTests).
@Suite("Offline grants: the helper's checks")
struct OfflineGrantTests {
    static let issuer = "https://keyauth.example"
    static let now: Int64 = 1_800_000_000
    let serverKey: JWSPrivateKey
    let keySet: JWKSet

    init() throws {
        serverKey = try JWSPrivateKey.generate(for: .es256)
        keySet = JWKSet(keys: [serverKey.keyID: serverKey.publicKey])
    }

    /// A grant as the server makes one, with `changes` applied to its claims.
    func grant(
        _ changes: [String: JSONValue] = [:], type: String = OfflineGrantFormat.type, key: JWSPrivateKey? = nil
    ) throws -> String {
        var claims = JWTClaims()
        claims.set("iss", string: Self.issuer)
        claims.set("sub", string: "alice")
        claims.set("host", string: "laptop")
        claims.set("linux_user", string: "alice")
        claims["cnf"] = .object(["jkt": .string("device-kid")])
        for (name, value) in changes { claims[name] = value }
        let signer = key ?? serverKey
        return try JWTBuilder(key: signer, lifetime: 3600, clock: .fixed(seconds: Self.now - 60)).sign(
            claims: claims, type: type, keyID: signer.keyID)
    }

    func verify(_ token: String, host: String = "laptop", linuxUser: String = "alice", now: Int64 = now) throws
        -> OfflineGrant
    {
        try OfflineGrant(
            verifying: token, keySet: keySet, issuer: Self.issuer, host: host, linuxUser: linuxUser,
            keyauthUser: "alice", now: now)
    }

    @Test("a grant of this server, host and users, unexpired, names its device key")
    func accepted() throws {
        let checked = try verify(try grant())
        #expect(checked.deviceKeyID == "device-kid")
        #expect(checked.expiresAt == Self.now - 60 + 3600)
    }

    @Test("an expired grant, or one issued far in the future, is refused")
    func expiredOrFuture() throws {
        let expired = try #require(throws: KeyAuthError.self) { try verify(try grant(), now: Self.now + 3600) }
        #expect(expired.message == "the grant expired")
        let future = try grant(["iat": .integer(Self.now + 3000), "exp": .integer(Self.now + 9000)])
        #expect(throws: KeyAuthError.self) { try verify(future) }
    }

    @Test("a grant of another host, Linux user, keyauth user or issuer is refused")
    func otherHostOrUser() throws {
        #expect(throws: KeyAuthError.self) { try verify(try grant(), host: "desktop") }
        #expect(throws: KeyAuthError.self) { try verify(try grant(), linuxUser: "bob") }
        #expect(throws: KeyAuthError.self) { try verify(try grant(["sub": .string("bob")])) }
        #expect(throws: KeyAuthError.self) { try verify(try grant(["iss": .string("https://evil.example")])) }
        #expect((try? verify(try grant(), host: "desktop")) == nil)
    }

    @Test("a tampered grant, one of an unknown key, or an access token is refused")
    func tamperedOrNotAGrant() throws {
        let token = try grant()
        let parts = token.split(separator: ".").map(String.init)
        let payload = try JSONValue(parsing: Base64URL.decode(parts[1]) ?? [])
        var claims = try #require(payload.objectValue)
        claims["host"] = .string("laptop")
        claims["sub"] = .string("root")
        let forged = parts[0] + "." + Base64URL.encode(JSONValue.object(claims).serializedBytes()) + "." + parts[2]
        #expect(throws: KeyAuthError.self) { try verify(forged) }
        let stranger = try JWSPrivateKey.generate(for: .es256)
        #expect(throws: KeyAuthError.self) { try verify(try grant(key: stranger)) }
        #expect(throws: KeyAuthError.self) { try verify(try grant(type: "at+jwt")) }
        #expect(throws: KeyAuthError.self) { try verify(try grant(type: "JWT")) }
        // A signature that does not verify, under the right kid.
        let broken = parts[0] + "." + parts[1] + "." + Base64URL.encode(Array(repeating: 1, count: 64))
        let error = try #require(throws: KeyAuthError.self) { try verify(broken) }
        #expect(error.code == .signatureInvalid)
    }

    @Test(
        "a grant of the right key with another typ spelling, a key-choosing header, another alg or odd claims is refused"
    )
    func headerAndClaimTricks() throws {
        let kid = serverKey.keyID
        let claims = try #require(
            try JSONValue(parsing: Base64URL.decode(try grant().split(separator: ".")[1]) ?? []).objectValue)
        /// `header` and `payload` as written, signed by the server's key with its own algorithm.
        func signed(_ header: String, _ payload: [String: JSONValue] = claims) throws -> String {
            try JWTBuilder.sign(
                headerJSON: Array(header.utf8), payloadJSON: JSONValue.object(payload).serializedBytes(),
                key: serverKey)
        }
        // The control: the same claims under the grant's own header pass.
        _ = try verify(try signed(#"{"alg":"ES256","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)"}"#))
        let refusedHeaders = [
            #"{"alg":"ES256","typ":"KEYAUTH-OFFLINE-GRANT+JWT","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"application/keyauth-offline-grant+jwt","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"\#(OfflineGrantFormat.type)","typ":"at+jwt","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)","jku":"https://evil.example/k"}"#,
            #"{"alg":"ES256","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)","crit":["host"]}"#,
            #"{"alg":"RS256","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)"}"#,
            #"{"alg":"EdDSA","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)"}"#,
            #"{"alg":"HS256","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)"}"#,
            #"{"alg":"none","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"\#(OfflineGrantFormat.type)"}"#,
        ]
        for header in refusedHeaders {
            #expect(throws: KeyAuthError.self, "\(header)") { try verify(try signed(header)) }
        }
        let header = #"{"alg":"ES256","typ":"\#(OfflineGrantFormat.type)","kid":"\#(kid)"}"#
        let refusedClaims: [(String, JSONValue?)] = [
            ("exp", .string("\(Self.now + 3600)")), ("exp", .number(Double(Self.now + 3600))), ("exp", nil),
            ("iat", .string("0")), ("iat", nil), ("cnf", nil), ("cnf", .object(["jkt": .integer(1)])),
            ("cnf", .string("device-kid")), ("host", .array(["laptop"])), ("host", nil), ("linux_user", nil),
            ("sub", .array(["alice"])), ("iss", .array([.string(Self.issuer)])), ("iss", nil),
        ]
        for (name, value) in refusedClaims {
            var changed = claims
            changed[name] = value
            #expect(throws: KeyAuthError.self, "\(name)") { try verify(try signed(header, changed)) }
        }
        // An access token's claims under the grant's typ name no host nor Linux user.
        let accessClaims: [String: JSONValue] = [
            "iss": .string(Self.issuer), "sub": "alice", "aud": .string(Self.issuer), "client_id": "device-kid",
            "cnf": .object(["jkt": "device-kid"]), "iat": .integer(Self.now), "exp": .integer(Self.now + 900),
            "jti": "t",
        ]
        #expect(throws: KeyAuthError.self) { try verify(try signed(header, accessClaims)) }
    }

    @Test(
        "the held PIN reader reads the socket once, hands the PIN out once a round, and again in a new round; a PIN waiting counts from the ask"
    )
    func heldPIN() throws {
        var pipeEnds: [Int32] = [0, 0]
        try #require(pipe(&pipeEnds) == 0)
        defer { close(pipeEnds[0]) }
        let reader = HeldPINReader(fileDescriptor: pipeEnds[0])
        let asked = ContinuousClock.now - .seconds(7)
        reader.noteAsked(at: asked)
        #expect(DescriptorIO.writeAll(pipeEnds[1], "4711\n"))
        close(pipeEnds[1])
        let first = try reader.readSecret(prompt: "PIN")
        #expect(first.withUnsafeBytes { Array($0) } == Array("4711".utf8))
        // The PIN was waiting when the login came to read it: it may have come as soon as it
        // was asked for, so the module's wait is counted from then.
        #expect(reader.arrivedAt == asked)
        let again = try #require(throws: KeyAuthError.self) { try reader.readSecret(prompt: "PIN") }
        #expect(again.code == .cancelled)
        reader.startNewRound()
        // The socket has ended: the PIN comes from the reader's own copy.
        #expect(try reader.readSecret(prompt: "PIN").withUnsafeBytes { Array($0) } == Array("4711".utf8))
    }

    @Test("a PIN its check refuses is not held: every later round gets the check's error, and the check runs once")
    func heldPINChecked() throws {
        var pipeEnds: [Int32] = [0, 0]
        try #require(pipe(&pipeEnds) == 0)
        defer { close(pipeEnds[0]) }
        let reader = HeldPINReader(fileDescriptor: pipeEnds[0])
        let checks = Mutex(0)
        reader.checkEachPIN { pin throws(KeyAuthError) in
            checks.withLock { $0 += 1 }
            #expect(pin.withUnsafeBytes { Array($0) } == Array("0000".utf8))
            throw KeyAuthError(.wrongPIN, "wrong PIN")
        }
        #expect(DescriptorIO.writeAll(pipeEnds[1], "0000\n"))
        close(pipeEnds[1])
        for _ in 0..<2 {
            let refused = try #require(throws: KeyAuthError.self) { try reader.readSecret(prompt: "PIN") }
            #expect(refused.code == .wrongPIN)
            reader.startNewRound()
        }
        #expect(checks.withLock { $0 } == 1)
    }

    @Test("a PIN the reader waited for counts from its arrival, one waiting from the ask, or the read when unnoted")
    func heldPINArrival() {
        let asked = ContinuousClock.now - .seconds(7)
        let read = ContinuousClock.now
        #expect(HeldPINReader.arrival(waitingAlready: false, askedAt: asked, readAt: read) == read)
        #expect(HeldPINReader.arrival(waitingAlready: true, askedAt: asked, readAt: read) == asked)
        #expect(HeldPINReader.arrival(waitingAlready: true, askedAt: nil, readAt: read) == read)
    }

    @Test("only a server's word that the device may not log in empties the grant, not a failure of the moment")
    func refusalsThatEmptyTheGrant() {
        func rejected(_ code: OAuthError.Code, status: Int = 400, description: String? = nil) -> KeyAuthError {
            KeyAuthError(
                .serverRejected, "refused",
                underlying: OAuthError(error: code, errorDescription: description, statusCode: status))
        }
        #expect(PAMHelper.refusesDevice(rejected(.invalidGrant)))
        #expect(PAMHelper.refusesDevice(rejected(.invalidGrant, description: "the assertion is not valid")))
        // One assertion refused for a rule of the moment (the seconds after a crash restart):
        // the device is still good, and so is its grant.
        #expect(
            !PAMHelper.refusesDevice(
                rejected(
                    .invalidGrant,
                    description: "the assertion is not valid: the assertion was issued before the server restarted "
                        + "after a crash; sign a new one in 10 s")))
        #expect(PAMHelper.refusesDevice(rejected(.accessDenied)))
        // A proxy's 403 page, read as access_denied from the status alone, says nothing.
        let proxyPage = KeyAuthError(
            .serverRejected, "HTTP 403",
            underlying: OAuthError(error: .accessDenied, errorDescription: nil, statusCode: 403, isFromBody: false))
        #expect(!PAMHelper.refusesDevice(proxyPage))
        #expect(PAMHelper.refusesDevice(KeyAuthError(.approvalPending, "pending")))
        #expect(!PAMHelper.refusesDevice(rejected(OAuthError.Code(rawValue: "slow_down"), status: 429)))
        #expect(!PAMHelper.refusesDevice(KeyAuthError(.serverRejected, "HTTP 503")))
        #expect(!PAMHelper.refusesDevice(KeyAuthError(.wrongPIN, "wrong PIN")))
        #expect(!PAMHelper.refusesDevice(KeyAuthError(.transportFailed, "connection refused")))
    }

    @Test("a refusal of another key leaves the grant; of the grant's own key, or with a damaged grant, ends it")
    func refusalOfAnotherKey() {
        func token(_ payload: String) -> String {
            Base64URL.encode(Array(#"{"alg":"ES256","typ":"keyauth-offline-grant+jwt"}"#.utf8)) + "."
                + Base64URL.encode(Array(payload.utf8)) + "." + Base64URL.encode([UInt8](repeating: 1, count: 64))
        }
        let grant = token(#"{"cnf":{"jkt":"key-A"}}"#)
        #expect(PAMHelper.refusalEndsGrant(grant, unreadable: false, refusedKeyID: "key-A"))
        // Malware's own account, with a key the server never saw, refused at sudo.
        #expect(!PAMHelper.refusalEndsGrant(grant, unreadable: false, refusedKeyID: "key-B"))
        #expect(!PAMHelper.refusalEndsGrant(grant, unreadable: false, refusedKeyID: nil))
        #expect(!PAMHelper.refusalEndsGrant(nil, unreadable: false, refusedKeyID: "key-A"))
        #expect(PAMHelper.refusalEndsGrant(nil, unreadable: true, refusedKeyID: "key-B"))
        #expect(PAMHelper.refusalEndsGrant("not a token", unreadable: false, refusedKeyID: "key-B"))
        #expect(PAMHelper.refusalEndsGrant(token(#"{"sub":"alice"}"#), unreadable: false, refusedKeyID: "key-B"))
    }

    @Test("the helper's work after the PIN fits the module's timeout: per request, and the grant's renewal")
    func workFitsTheModulesTimeout() throws {
        let base = "keyauth-pam 1\nuser a\nserver https://s\n"
        #expect(try PAMHelperRequest(text: base + "\n").answerTimeout == 10)
        #expect(try PAMHelperRequest(text: base + "timeout 30\n\n").answerTimeout == 30)
        for bad in ["0", "121", "ten", "-5"] {
            #expect(throws: KeyAuthError.self) { try PAMHelperRequest(text: base + "timeout \(bad)\n\n") }
        }
        // Three requests at most after the PIN, each a third of the wait less a second, 1 to 5 s.
        #expect(PAMHelper.networkTimeout(answerTimeout: 10) == 3)
        #expect(PAMHelper.networkTimeout(answerTimeout: 1) == 1)
        #expect(PAMHelper.networkTimeout(answerTimeout: 120) == 5)
        #expect(3 * PAMHelper.networkTimeout(answerTimeout: 10) < 10)
        // The renewal's fetch gets what is left of the wait, and none when little is.
        let arrived = ContinuousClock.now
        let late = PAMHelper.timeLeft(answerTimeout: 10, since: arrived, now: arrived + .seconds(9))
        #expect(abs(late - 1) < 0.001 && late < PAMHelper.minimumRenewalTime)
        let early = PAMHelper.timeLeft(answerTimeout: 10, since: arrived, now: arrived + .milliseconds(500))
        #expect(abs(early - 9.5) < 0.001)
        #expect(PAMHelper.timeLeft(answerTimeout: 10, since: nil) == 10)
    }

    @Test("the request's offline field is yes by default, no when the module says so, and nothing else")
    func requestOfflineField() throws {
        #expect(try PAMHelperRequest(text: "keyauth-pam 1\nuser a\nserver https://s\n\n").allowsOffline)
        #expect(try !PAMHelperRequest(text: "keyauth-pam 1\nuser a\nserver https://s\noffline no\n\n").allowsOffline)
        #expect(try PAMHelperRequest(text: "keyauth-pam 1\nuser a\nserver https://s\noffline yes\n\n").allowsOffline)
        #expect(throws: KeyAuthError.self) {
            try PAMHelperRequest(text: "keyauth-pam 1\nuser a\nserver https://s\noffline 1\n\n")
        }
    }
}

/// The root-only store of grants, in a directory of the test's own.
@Suite(
    "Offline grants: the root-only store",
    .enabled(if: geteuid() == 0, "the store is root's: needs root"))
struct OfflineGrantStoreTests {
    @Test("a grant saved is read back, and an emptied file is no grant; the file is 0600 in a 0700 directory")
    func savesAndClears() throws {
        let scratch = TemporaryDirectory("keyauth-offline-store")
        defer { scratch.remove() }
        let directory = scratch.path + "/offline"
        let record = StoredOfflineGrant(
            server: "https://k.example", grant: "a.b.c", keySet: .object(["keys": .array([])]))
        do {
            let store = try OfflineGrantStore.open(linuxUser: "alice", directory: directory)
            #expect(store.stored == nil)
            try store.save(record)
        }
        var status = stat()
        #expect(stat(directory, &status) == 0 && status.st_mode & 0o777 == 0o700)
        #expect(stat(directory + "/alice.grant", &status) == 0 && status.st_mode & 0o777 == 0o600)
        let reopened = try OfflineGrantStore.open(linuxUser: "alice", directory: directory)
        #expect(reopened.stored == record)
        try reopened.clear()
        #expect(try OfflineGrantStore.open(linuxUser: "alice", directory: directory).stored == nil)
    }

    @Test("a grant too long for the store to read back is refused before anything is written")
    func refusesWhatItCouldNotRead() throws {
        let scratch = TemporaryDirectory("keyauth-offline-store")
        defer { scratch.remove() }
        let directory = scratch.path + "/offline"
        let store = try OfflineGrantStore.open(linuxUser: "alice", directory: directory)
        let small = StoredOfflineGrant(
            server: "https://k.example", grant: "a.b.c", keySet: .object(["keys": .array([])]))
        try store.save(small)
        // A JWK set of 70 KiB (keys with long certificate chains, say).
        let padding = JSONValue.string(String(repeating: "x", count: 70 * 1024))
        let large = StoredOfflineGrant(
            server: "https://k.example", grant: "a.b.c", keySet: .object(["keys": .array([.object(["x5c": padding])])]))
        let error = #expect(throws: KeyAuthError.self) { try store.save(large) }
        #expect(error?.code == .invalidArgument)
        // The grant saved before is still there, and the file still opens.
        #expect(try OfflineGrantStore.open(linuxUser: "alice", directory: directory).stored == small)
    }

    @Test("a looser directory or file, a link, or a user name with a slash is refused")
    func refusesLooserStores() throws {
        let scratch = TemporaryDirectory("keyauth-offline-store")
        defer { scratch.remove() }
        let directory = scratch.path + "/offline"
        _ = try OfflineGrantStore.open(linuxUser: "alice", directory: directory)
        chmod(directory + "/alice.grant", 0o644)
        #expect(throws: KeyAuthError.self) { try OfflineGrantStore.open(linuxUser: "alice", directory: directory) }
        chmod(directory + "/alice.grant", 0o600)
        symlink(directory + "/alice.grant", directory + "/bob.grant")
        #expect(throws: KeyAuthError.self) { try OfflineGrantStore.open(linuxUser: "bob", directory: directory) }
        #expect(throws: KeyAuthError.self) { try OfflineGrantStore.open(linuxUser: "../alice", directory: directory) }
        chmod(directory, 0o755)
        #expect(throws: KeyAuthError.self) { try OfflineGrantStore.open(linuxUser: "alice", directory: directory) }
    }
}
