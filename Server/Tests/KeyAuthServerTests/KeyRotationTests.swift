import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

@testable import KeyAuthServer

/// The server's signing keys of any algorithm, and their rotation: a new key is published at
/// once and signs after the delay, the old one keeps verifying until its last token expires,
/// then is retired (PROTOCOL.md section 3, "Key rotation").
@Suite("Signing key algorithms and rotation", .timeLimit(.minutes(10)))
struct KeyRotationTests {
    typealias Entry = SigningKeySchedule.Entry

    @Test("the schedule: the last key whose active_from has passed signs; earlier ones are previous until retired")
    func schedule() {
        let schedule = SigningKeySchedule([
            Entry(kid: "c", algorithm: .edDSA, createdAt: 300, activeFrom: 1_000, retiredAt: nil),
            Entry(kid: "a", algorithm: .rs256, createdAt: 100, activeFrom: 100, retiredAt: nil),
            Entry(kid: "b", algorithm: .es256, createdAt: 200, activeFrom: 500, retiredAt: nil),
        ])
        #expect(schedule.entries.map(\.kid) == ["a", "b", "c"])
        #expect(schedule.currentKeyID(at: 499) == "a")
        #expect(schedule.currentKeyID(at: 500) == "b")
        #expect(schedule.currentKeyID(at: 1_000) == "c")
        // a stopped signing access tokens at 500, but as the only RS256 key it still signs ID
        // tokens: signed until now.
        #expect(
            schedule.states(at: 600) == [
                "a": .previous(signedUntil: 600), "b": .current, "c": .next(activeFrom: 1_000),
            ])
        // a signed until 500; its tokens (lifetime 900, leeway 10) verify until 1410.
        // a is the only RS256 key, which signs ID tokens whatever signs access tokens: it stays.
        #expect(schedule.retirable(at: 1_411, tokenLifetime: 900, leeway: 10).isEmpty)
        #expect(schedule.retirable(at: 1_911, tokenLifetime: 900, leeway: 10) == ["b"])
        #expect(schedule.currentKeyID(at: 1_911, algorithm: .rs256) == "a")
        let withNewerRS256 = SigningKeySchedule(
            schedule.entries + [Entry(kid: "d", algorithm: .rs256, createdAt: 400, activeFrom: 400, retiredAt: nil)])
        #expect(withNewerRS256.currentKeyID(at: 1_000, algorithm: .rs256) == "d")
        // d took over from a at 400: a's last token verifies until 1310.
        #expect(withNewerRS256.retirable(at: 1_310, tokenLifetime: 900, leeway: 10).isEmpty)
        #expect(withNewerRS256.retirable(at: 1_311, tokenLifetime: 900, leeway: 10) == ["a"])
        // RS256, then ES256, then RS256 again: a signed access tokens until 500 but ID tokens
        // until e took over at 2000, and stays published until those expire.
        let backToRS256 = SigningKeySchedule([
            Entry(kid: "a", algorithm: .rs256, createdAt: 100, activeFrom: 100, retiredAt: nil),
            Entry(kid: "b", algorithm: .es256, createdAt: 200, activeFrom: 500, retiredAt: nil),
            Entry(kid: "e", algorithm: .rs256, createdAt: 1_900, activeFrom: 2_000, retiredAt: nil),
        ])
        #expect(backToRS256.currentKeyID(at: 1_999, algorithm: .rs256) == "a")
        #expect(backToRS256.states(at: 2_100)["a"] == .previous(signedUntil: 2_000))
        #expect(backToRS256.states(at: 2_100)["b"] == .previous(signedUntil: 2_000))
        #expect(backToRS256.retirable(at: 2_910, tokenLifetime: 900, leeway: 10).isEmpty)
        #expect(backToRS256.retirable(at: 2_911, tokenLifetime: 900, leeway: 10) == ["a", "b"])
        // A clock set back before every key: the earliest key still signs.
        #expect(schedule.currentKeyID(at: 0) == "a")
        let retired = SigningKeySchedule([
            Entry(kid: "a", algorithm: .rs256, createdAt: 100, activeFrom: 100, retiredAt: 2_000),
            Entry(kid: "b", algorithm: .es256, createdAt: 200, activeFrom: 500, retiredAt: nil),
        ])
        #expect(retired.currentKeyID(at: 3_000) == "b")
        #expect(retired.states(at: 3_000)["a"] == .retired(at: 2_000))
        #expect(retired.retirable(at: 9_000, tokenLifetime: 900, leeway: 10).isEmpty)
    }

    @Test(
        "a server on an empty database makes its first key with --token-alg, and signs and verifies with it",
        arguments: JWSAlgorithm.allCases)
    func tokenAlgorithm(_ algorithm: JWSAlgorithm) throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath, now: environment.clock.closure)
        let responder = try KeyAuthResponder(
            configuration: try environment.configuration { $0.tokenAlgorithm = algorithm },
            issuer: TestEnvironment.issuer, storage: storage, log: SilentLog(), now: environment.clock.closure)
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer,
            clock: environment.clock, storage: storage)
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let jws = try CompactJWS(parsing: token, algorithms: Set(JWSAlgorithm.allCases))
        #expect(jws.algorithm == algorithm)
        let jwks = try api.send("GET", "/.well-known/jwks.json")
        // The text written when the keys were loaded: the set's JSON and one newline, which
        // clients may cache for five minutes.
        #expect(jwks.json.map { $0.serialized() + "\n" } == jwks.text, "\(jwks.text)")
        #expect(jwks.headers["Content-Type"] == "application/json")
        #expect(jwks.headers["Cache-Control"] == "public, max-age=300")
        // Besides the token key, a server whose tokens are not RS256 publishes an RS256 key for
        // ID tokens (PROTOCOL.md section 10).
        let all = try #require(jwks.json?["keys"]?.arrayValue)
        #expect(all.count == (algorithm == .rs256 ? 1 : 2))
        #expect(all.contains { $0["alg"] == "RS256" })
        let published = all.filter { $0["alg"]?.stringValue == algorithm.rawValue }
        #expect(published.count == 1)
        #expect(published.first?["alg"]?.stringValue == algorithm.rawValue)
        #expect(published.first?["use"]?.stringValue == "sig")
        #expect(
            published.first?["kty"]?.stringValue == ["RS256": "RSA", "ES256": "EC", "EdDSA": "OKP"][algorithm.rawValue])
        let curves: [JWSAlgorithm: String] = [.es256: "P-256", .edDSA: "Ed25519"]
        #expect(published.first?["crv"]?.stringValue == curves[algorithm])
        #expect(published.first?["d"] == nil)
        let key = try JWSPublicKey(jwk: JWK(jsonValue: try #require(published.first)))
        #expect(published.first?["kid"]?.stringValue == key.thumbprint)
        #expect(jws.keyID == key.thumbprint)
        let checked = try CheckedAccessToken(
            token, issuer: TestEnvironment.issuer, keys: [key.thumbprint: key], clock: environment.clock.clock)
        #expect(checked.subject == "alice")
        #expect(try api.authorized("GET", "/v1/devices", token: token).status == 200)
        #expect(try storage.signingKeys().map(\.algorithm) == (algorithm == .rs256 ? [.rs256] : [.rs256, algorithm]))
    }

    @Test("a rotation publishes the new key at once, signs with it after the delay, and retires the old one later")
    func rotates() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let clock = environment.clock
        let device = try ServerTestKeys.key("alice-1")
        let before = try api.activeDevice(user: "alice", key: device)
        let oldKID = try #require(try CompactJWS(parsing: before).keyID)
        let rotation = SigningKeyRotation(storage: api.storage, tokenLifetime: 900, now: clock.closure)
        #expect(try rotation.currentAlgorithm() == .rs256)

        // RS256 to RS256: a key of another algorithm would leave the old one published to sign
        // ID tokens (see the schedule test).
        let (newKID, activeFrom) = try rotation.rotate(to: .rs256)
        #expect(activeFrom == clock.now + SigningKeyRotation.defaultDelay)
        #expect(try rotation.list().map(\.state) == [.current, .next(activeFrom: activeFrom)])
        // Unknown to the running server until it reloads: the periodic cleanup does.
        #expect(try Self.publishedKeyIDs(api) == [oldKID])
        let responder = try #require((api.transport as? DirectTransport)?.responder)
        responder.purgeExpired()
        #expect(try Self.publishedKeyIDs(api) == [oldKID, newKID])
        #expect(try CompactJWS(parsing: try api.accessToken(device)).keyID == oldKID)

        clock.advance(by: SigningKeyRotation.defaultDelay)
        let after = try api.accessToken(device)
        #expect(try CompactJWS(parsing: after).keyID == newKID)
        // Both tokens verify against the published set, and the server takes both.
        let keys = try Self.publishedKeys(api)
        for token in [before, after] {
            let checked = try CheckedAccessToken(
                token, issuer: TestEnvironment.issuer, keys: keys, clock: clock.clock)
            #expect(checked.subject == "alice")
            #expect(try api.authorized("GET", "/v1/devices", token: token).status == 200)
        }
        #expect(try rotation.list().map(\.state) == [.previous(signedUntil: activeFrom), .current])

        // The old key signed its last token at activeFrom; it retires once that token expired.
        clock.advance(by: 900 + DeviceAssertionVerifier.leeway)
        responder.purgeExpired()
        #expect(try Self.publishedKeyIDs(api) == [oldKID, newKID])
        clock.advance(by: 1)
        responder.purgeExpired()
        #expect(try Self.publishedKeyIDs(api) == [newKID])
        let listed = try rotation.list()
        #expect(listed.map(\.kid) == [oldKID, newKID])
        #expect(listed.first?.state == .retired(at: clock.now))
        #expect(try api.storage.signingKeys(includingRetired: true).first?.privatePEM == [])
        #expect(try api.authorized("GET", "/v1/devices", token: try api.accessToken(device)).status == 200)
    }

    @Test(
        "after a rotation to ES256 the previous RS256 key keeps signing ID tokens: listed as id-tokens, never retired")
    func idTokenKeyIsListed() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let clock = environment.clock
        let rotation = SigningKeyRotation(storage: api.storage, tokenLifetime: 900, now: clock.closure)
        let rsaKID = try #require(try rotation.list().first?.kid)
        let (ecKID, _) = try rotation.rotate(to: .es256)
        clock.advance(by: SigningKeyRotation.defaultDelay + 900 + DeviceAssertionVerifier.leeway + 1)
        let responder = try #require((api.transport as? DirectTransport)?.responder)
        responder.purgeExpired()
        let listed = try rotation.list()
        #expect(listed.map(\.kid) == [rsaKID, ecKID])
        #expect(listed.map(\.signsIDTokens) == [true, false])
        #expect(listed.first?.retiresAt == nil)
        #expect(try Self.publishedKeyIDs(api) == [rsaKID, ecKID])
    }

    @Test("a server learns of a key another instance signs with when a token names it, without waiting for cleanup")
    func reloadsForUnknownKeyID() throws {
        let environment = TestEnvironment()
        let first = try environment.directAPI()
        let second = try environment.directAPI()
        let device = try ServerTestKeys.key("alice-1")
        _ = try first.activeDevice(user: "alice", key: device)
        let rotation = SigningKeyRotation(storage: first.storage, tokenLifetime: 900, now: environment.clock.closure)
        let (newKID, activeFrom) = try rotation.rotate(to: .edDSA, delay: 0)
        // In the same second as the first key: the new one takes over a second later, never tied.
        #expect(activeFrom == environment.clock.now + 1)
        environment.clock.advance(by: 1)
        let firstResponder = try #require((first.transport as? DirectTransport)?.responder)
        firstResponder.purgeExpired()
        let token = try first.accessToken(device)
        #expect(try CompactJWS(parsing: token, algorithms: [.edDSA]).keyID == newKID)
        // The second instance has not reloaded; the unknown kid makes it read the keys again.
        environment.clock.advance(by: ServerSigningKeys.reloadInterval)
        #expect(try second.authorized("GET", "/v1/devices", token: token).status == 200)
        #expect(try Self.publishedKeyIDs(second).contains(newKID))
    }

    @Test("tokens naming made-up keys do not hold back an instance from learning of a key another signs with")
    func madeUpKeyIDsDoNotDelayRotation() throws {
        let environment = TestEnvironment()
        let first = try environment.directAPI()
        let second = try environment.directAPI()
        let device = try ServerTestKeys.key("alice-1")
        _ = try first.activeDevice(user: "alice", key: device)
        // Anyone can send a token naming a key nobody has: it makes the second instance reload.
        let valid = try first.accessToken(device)
        let parts = valid.split(separator: ".")
        let header = Base64URL.encode(
            Array("{\"alg\":\"RS256\",\"typ\":\"at+jwt\",\"kid\":\"\(String(repeating: "A", count: 43))\"}".utf8))
        let madeUp = "\(header).\(parts[1]).\(parts[2])"
        #expect(try second.authorized("GET", "/v1/devices", token: madeUp).status == 401)
        // In that same second the key is rotated with no delay, and the first instance signs
        // with the new key a second later, after its cleanup.
        let rotation = SigningKeyRotation(storage: first.storage, tokenLifetime: 900, now: environment.clock.closure)
        let (newKID, _) = try rotation.rotate(to: .edDSA, delay: 0)
        environment.clock.advance(by: 1)
        try #require((first.transport as? DirectTransport)?.responder).purgeExpired()
        let token = try first.accessToken(device)
        #expect(try CompactJWS(parsing: token, algorithms: [.edDSA]).keyID == newKID)
        // The second instance's last reload was a second ago: it reloads again and accepts.
        #expect(try second.authorized("GET", "/v1/devices", token: token).status == 200)
    }

    @Test("keyauth-server keys list and keys rotate: states, the new kid, and the key file that does not rotate")
    func keysCommand() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let storage = try environment.openStorage()
        let oldKID = try #require(try storage.signingKeys().first?.kid)
        storage.close()
        let database = environment.databasePath
        chmod(database, 0o600)

        // The one duration syntax: `--delay 5m` (was refused: seconds only).
        let rotated = Self.run(["keys", "rotate", "--alg", "EdDSA", "--delay", "5m", "--db", database])
        #expect(rotated.status == 0, "\(rotated.error)")
        let newKID = rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(newKID.count == 43)
        // It says when running servers publish it: at their next cleanup, not at once.
        #expect(
            rotated.error.contains(
                "new EdDSA signing key \(newKID) stored; each running server publishes it at its next cleanup "
                    + "(within its --cleanup-interval, default 1m) and signs with it from "))
        #expect(rotated.error.contains(" (in 5m); "))

        let listed = Self.run(["keys", "list", "--db", database])
        #expect(listed.status == 0, "\(listed.error)")
        let rows = listed.output.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(rows.first == ["KID", "ALG", "STATE", "CREATED", "SIGNS_FROM", "RETIRES"])
        #expect(
            rows.dropFirst().map { Array($0.prefix(3)) } == [[oldKID, "RS256", "current"], [newKID, "EdDSA", "next"]])
        #expect(rows.dropFirst().allSatisfy { $0.count == 6 && $0[5] == "-" })
        let json = Self.run(["keys", "list", "--json", "--db", database]).output
        let keys = try #require(try JSONValue(parsing: json).arrayValue)
        #expect(keys.map { $0["state"] } == [.string("current"), .string("next")])
        #expect(keys.last?["kid"] == .string(newKID))
        #expect(keys.last?["retires_at"] == .null)

        // Without --alg, the rotation keeps the current key's algorithm.
        let again = Self.run(["keys", "rotate", "--delay", "0", "--db", database])
        #expect(again.error.contains("new RS256 signing key"), "\(again.error)")

        let file = Self.run(
            ["keys", "rotate", "--db", database], environment: ["KEYAUTH_SERVER_SIGNING_KEY_FILE": "/etc/key.pem"])
        #expect(file.status == 1)
        #expect(file.error.contains("--signing-key-file /etc/key.pem, which does not rotate"))
        for arguments in [
            ["keys", "rotate", "--alg", "HS256"], ["keys", "rotate", "--delay", "-1"], ["keys", "spin"],
        ] {
            #expect(Self.run(arguments + ["--db", database]).status == 64, "\(arguments)")
        }
        #expect(Self.run(["keys", "list", "--db", environment.directory.path + "/none.db"]).status == 69)
    }

    @Test("keys rotate makes an RSA key of --signing-key-bits, and then keeps the newest RSA key's size")
    func rotationKeepsKeySize() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        try environment.openStorage().close()
        let database = environment.databasePath
        chmod(database, 0o600)
        func rotate(_ extra: [String]) -> String {
            let rotated = Self.run(["keys", "rotate", "--delay", "0", "--db", database] + extra)
            #expect(rotated.status == 0, "\(extra): \(rotated.error)")
            return rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let chosen = rotate(["--signing-key-bits", "3072"])
        // An ES256 key in between, then RS256 again without the option: still 3072 bits (was 2048).
        _ = rotate(["--alg", "ES256"])
        let kept = rotate(["--alg", "RS256"])
        let fromVariable = Self.run(
            ["keys", "rotate", "--alg", "RS256", "--delay", "0", "--db", database],
            environment: ["KEYAUTH_SERVER_SIGNING_KEY_BITS": "4096"])
        #expect(fromVariable.status == 0, "\(fromVariable.error)")
        let storage = try environment.openStorage()
        defer { storage.close() }
        var sizes: [String: Int] = [:]
        for record in try storage.signingKeys() {
            if case .rsa(let key) = try JWSPrivateKey(pemRepresentation: record.privatePEM) {
                sizes[record.kid] = key.publicKey.bits
            }
        }
        #expect(sizes[chosen] == 3072)
        #expect(sizes[kept] == 3072)
        #expect(sizes[fromVariable.output.trimmingCharacters(in: .whitespacesAndNewlines)] == 4096)
        let refused = Self.run(["keys", "rotate", "--signing-key-bits", "1024", "--db", database])
        #expect(refused.status == 64)
        #expect(refused.error.contains("expected 2048, 3072 or 4096, got 1024"), "\(refused.error)")
    }

    @Test("--signing-key-file takes an EC P-256 or Ed25519 key, which then signs ES256 or EdDSA")
    func curveKeyFiles() throws {
        let environment = TestEnvironment()
        for key in [JWSPrivateKey.p256(try .generate()), .ed25519(try .generate())] {
            let path = environment.directory.path + "/\(key.algorithm.rawValue).pem"
            try SecureFile.write(try key.pkcs8PEM(), to: path)
            let api = try environment.directAPI { $0.signingKeyFile = path }
            let token = try api.activeDevice(
                user: "user-\(key.algorithm.rawValue.lowercased())",
                key: try ServerTestKeys.key("file-\(key.algorithm.rawValue)"))
            let jws = try CompactJWS(parsing: token, algorithms: [key.algorithm])
            #expect(jws.keyID == key.keyID)
            #expect(try Self.publishedKeyIDs(api) == [key.keyID])
        }
    }

    @Test(
        "tokens signed before and after a rotation verify in PyJWT, jwcrypto and AccessTokenVerifier; a retired key leaves the set",
        arguments: [(JWSAlgorithm.rs256, JWSAlgorithm.es256), (.es256, .edDSA), (.edDSA, .rs256)])
    func rotationInterop(_ from: JWSAlgorithm, _ to: JWSAlgorithm) async throws {
        // The real clock: PyJWT and jwcrypto check exp and iat against it.
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let api = try environment.directAPI()
        let responder = try #require((api.transport as? DirectTransport)?.responder)
        let rotation = SigningKeyRotation(storage: api.storage, tokenLifetime: 900, now: environment.clock.closure)
        // The test database starts with an RSA key: a first rotation makes `from` the current one.
        if from != .rs256 {
            _ = try rotation.rotate(to: from, delay: 0)
            environment.clock.advance(by: 1)
            responder.purgeExpired()
        }
        let device = try ServerTestKeys.key("alice-1")
        let before = try api.activeDevice(user: "alice", key: device)
        let (newKID, _) = try rotation.rotate(to: to, delay: 0)
        environment.clock.advance(by: 1)
        responder.purgeExpired()
        let after = try api.accessToken(device)
        #expect(try CompactJWS(parsing: before, algorithms: [from]).keyID != newKID)
        #expect(try CompactJWS(parsing: after, algorithms: [to]).keyID == newKID)

        let jwks = try api.send("GET", "/.well-known/jwks.json").text
        let discovery = try api.send("GET", "/.well-known/openid-configuration").text
        let external = try Self.verifyExternally(
            jwks: jwks, issuer: TestEnvironment.issuer, tokens: [before, after])
        #expect(external == ["pyjwt:alice", "jwcrypto:alice", "pyjwt:alice", "jwcrypto:alice"])

        let fetcher = FixedDocuments([
            TestEnvironment.issuer + "/.well-known/openid-configuration": discovery,
            TestEnvironment.issuer + "/.well-known/jwks.json": jwks,
        ])
        let verifier = try AccessTokenVerifier(
            issuer: TestEnvironment.issuer, fetcher: fetcher, clock: environment.clock.clock)
        for token in [before, after] {
            let claims = try await verifier.verify(token)
            #expect(claims.user == "alice")
            #expect(claims.clientID == device.publicKey.fingerprint)
            #expect(try verifier.verify(token, keySet: JWKSet(json: Array(jwks.utf8))).user == "alice")
        }

        // Once the old key's last token expired, the cleanup retires it and the set drops it;
        // the newest RS256 key stays while it signs ID tokens (PROTOCOL.md section 10).
        environment.clock.advance(by: 900 + DeviceAssertionVerifier.leeway + 1)
        responder.purgeExpired()
        let idTokenKID = try responder.service.tokens.keys.currentRS256(at: environment.clock.now).kid
        #expect(Set(try Self.publishedKeyIDs(api)) == Set([newKID, idTokenKID]))
        guard try CompactJWS(parsing: before, algorithms: [from]).keyID != idTokenKID else { return }
        let retiredSet = try JWKSet(json: Array(try api.send("GET", "/.well-known/jwks.json").text.utf8))
        let error = #expect(throws: KeyAuthError.self) { try verifier.verify(before, keySet: retiredSet) }
        #expect(error?.code == .signatureInvalid || error?.code == .claimInvalid)
    }

    // MARK: - Helpers

    /// Serves fixed documents by URL, as an issuer would.
    struct FixedDocuments: KeySetFetcher {
        let documents: [String: String]

        init(_ documents: [String: String]) {
            self.documents = documents
        }

        func fetch(_ url: String) async throws(KeyAuthError) -> KeySetDocument {
            guard let text = documents[url] else { throw KeyAuthError(.transportFailed, "no document at \(url)") }
            return KeySetDocument(body: Array(text.utf8), cacheControl: "max-age=300")
        }
    }

    /// Verifies each token with PyJWT and with jwcrypto against `jwks`, checking the signature
    /// with the key its kid names, iss, aud and the times: "library:sub" or "library:error".
    static func verifyExternally(jwks: String, issuer: String, tokens: [String]) throws -> [String] {
        let directory = TemporaryDirectory("keyauth-rotation")
        defer { directory.remove() }
        let input = directory.path + "/input.json"
        let spec: [String: Any] = ["jwks": jwks, "issuer": issuer, "tokens": tokens]
        try JSONSerialization.data(withJSONObject: spec).write(to: URL(fileURLWithPath: input))
        let result = try ExternalCommand.run(["/usr/bin/python3", "-c", Self.externalVerifiers, input])
        guard result.status == 0 else { throw TestFailure("python3 failed: \(result.errorOutput)") }
        return result.output.split(separator: "\n").map(String.init)
    }

    static let externalVerifiers = """
        import json, sys
        import jwt
        from jwcrypto import jwk as cjwk, jwt as cjwt
        spec = json.load(open(sys.argv[1]))
        keyset = json.loads(spec["jwks"])
        pyjwt_keys = {key.key_id: key for key in jwt.PyJWKSet.from_dict(keyset).keys}
        algs = {entry["kid"]: entry["alg"] for entry in keyset["keys"]}
        jwcrypto_keys = cjwk.JWKSet.from_json(spec["jwks"])
        for token in spec["tokens"]:
            kid = jwt.get_unverified_header(token)["kid"]
            try:
                claims = jwt.decode(token, pyjwt_keys[kid].key, algorithms=[algs[kid]],
                    audience=spec["issuer"], issuer=spec["issuer"], leeway=30)
                print("pyjwt:" + claims["sub"])
            except Exception as error:
                print("pyjwt:error " + type(error).__name__)
            try:
                checked = cjwt.JWT(jwt=token, key=jwcrypto_keys, algs=[algs[kid]],
                    check_claims={"iss": spec["issuer"], "aud": spec["issuer"], "exp": None})
                print("jwcrypto:" + json.loads(checked.claims)["sub"])
            except Exception as error:
                print("jwcrypto:error " + type(error).__name__)
        """

    static func publishedKeys(_ api: TestAPI) throws -> [String: JWSPublicKey] {
        let response = try api.send("GET", "/.well-known/jwks.json")
        var keys: [String: JWSPublicKey] = [:]
        for entry in response.json?["keys"]?.arrayValue ?? [] {
            keys[try #require(entry["kid"]?.stringValue)] = try JWSPublicKey(jwk: JWK(jsonValue: entry))
        }
        return keys
    }

    static func publishedKeyIDs(_ api: TestAPI) throws -> [String] {
        let response = try api.send("GET", "/.well-known/jwks.json")
        return (response.json?["keys"]?.arrayValue ?? []).compactMap { $0["kid"]?.stringValue }
    }

    static func run(_ arguments: [String], environment: [String: String] = [:]) -> (
        status: Int32, output: String, error: String
    ) {
        let standard = Mutex("")
        let error = Mutex("")
        let status = ServerCommand.main(
            arguments: arguments, environment: environment,
            output: ServerCommand.Output(
                standard: { text in standard.withLock { $0 += text } }, error: { text in error.withLock { $0 += text } }
            ))
        return (status, standard.withLock { $0 }, error.withLock { $0 })
    }
}
