import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

@Suite("Device registration")
struct RegistrationTests {
    @Test("a user's first device is active at once and answers with its kid, user, name and status")
    func firstDeviceActive() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let response = try api.register(user: "alice", key: key, name: "alice-laptop")
        #expect(response.status == 201)
        #expect(response.json?["kid"]?.stringValue == key.publicKey.fingerprint)
        #expect(response.json?["user"]?.stringValue == "alice")
        #expect(response.json?["name"]?.stringValue == "alice-laptop")
        #expect(response.json?["status"]?.stringValue == "active")
        #expect(response.headers["Content-Type"] == "application/json")
    }

    @Test("registering the same key for the same user again is idempotent (200)")
    func sameKeySameUser() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let again = try api.register(user: "alice", key: key)
        #expect(again.status == 200)
        #expect(again.json?["status"]?.stringValue == "active")
    }

    @Test("a key registered to another user gives 409 invalid_request")
    func keyOfAnotherUser() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let response = try api.register(user: "mallory", key: key)
        #expect(response.status == 409)
        #expect(response.errorCode == "invalid_request")
    }

    @Test("a second device of an existing user is pending (202)")
    func secondDevicePending() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-1")).status == 201)
        let response = try api.register(user: "alice", key: try ServerTestKeys.key("alice-2"))
        #expect(response.status == 202)
        #expect(response.json?["status"]?.stringValue == "pending")
    }

    @Test("a private key PEM is refused with 400 invalid_request and never stored")
    func privateKeyRefused() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let privatePEM = String(decoding: try key.pkcs8PEM(), as: UTF8.self)
        let response = try api.register(user: "alice", key: key, publicKeyPEM: privatePEM)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_request")
        #expect(!(response.errorDescription ?? "").contains("BEGIN"))
        #expect(try api.storage.allDevices().isEmpty)
        let rsaPEM = privatePEM.replacingOccurrences(of: "PRIVATE KEY", with: "RSA PRIVATE KEY")
        #expect(try api.register(user: "alice", key: key, publicKeyPEM: rsaPEM).errorCode == "invalid_request")
    }

    @Test("a 1024-bit key is refused with 400 invalid_request")
    func weakKeyRefused() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let weak = try ServerTestKeys.opensslKey(bits: 1024)
        let response = try api.register(user: "alice", key: weak)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_request")
    }

    @Test("a key with public exponent 3 is refused with 400 invalid_request")
    func exponentThreeRefused() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let weak = try ServerTestKeys.opensslKey(bits: 2048, exponent: 3)
        let response = try api.register(user: "alice", key: weak)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_request")
    }

    @Test("a key with the ROCA fingerprint is refused with 400 invalid_request, before its proof is read")
    func rocaKeyRefused() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let roca = try RSAPublicKey(modulus: ROCAShapedModulus.make(bits: 2048), exponent: [0x01, 0x00, 0x01])
        let response = try api.registerBody(
            .object([
                "user": .string("alice"), "name": .string("laptop"),
                "public_key": .string(roca.pemRepresentation), "proof": .string("not read"),
            ]))
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_request")
        #expect(response.text.contains("CVE-2017-15361"), "\(response.text)")
        #expect(try api.storage.device(kid: roca.fingerprint) == nil)
    }

    @Test("a proof signed by another key is refused with invalid_grant")
    func proofByAnotherKey() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let other = try ServerTestKeys.key("stranger")
        let forged = try api.assertion(other, keyID: key.publicKey.fingerprint)
        let response = try api.register(user: "alice", key: key, proof: forged)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_grant")
        let othersOwn = try api.register(user: "alice", key: key, proof: try api.assertion(other))
        #expect(othersOwn.errorCode == "invalid_grant")
        #expect(try api.storage.allDevices().isEmpty)
    }

    @Test("a proof cannot be used twice, even for a different registration")
    func proofReplay() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let proof = try api.assertion(key)
        #expect(try api.register(user: "alice", key: key, proof: proof).status == 201)
        let replayed = try api.register(user: "alice", key: key, proof: proof)
        #expect(replayed.status == 400)
        #expect(replayed.errorCode == "invalid_grant")
    }

    @Test("every hostile proof is refused with invalid_grant", arguments: HostileAssertion.allCases)
    func hostileProofs(_ hostile: HostileAssertion) throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let proof = try hostile.make(api: api, key: key, other: try ServerTestKeys.key("stranger"))
        let response = try api.register(user: "alice", key: key, proof: proof)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_grant")
    }

    @Test(
        "malformed bodies and fields give 400 invalid_request",
        arguments: [
            "not json", "[]", "{\"user\":\"alice\"}",
            "{\"user\":1,\"name\":\"n\",\"public_key\":\"k\",\"proof\":\"p\"}",
        ])
    func malformedBodies(_ body: String) throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let response = try api.send(
            "POST", "/v1/devices", headers: ["Content-Type": "application/json"], body: Array(body.utf8))
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_request")
    }

    @Test("bad user names, bad device names and a bad PEM give 400 invalid_request")
    func badFields() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        for user in ["", "al ice", "alice/..", String(repeating: "a", count: 65), "älice"] {
            #expect(try api.register(user: user, key: key).errorCode == "invalid_request", "user \(user)")
        }
        for name in ["", "line\nbreak", String(repeating: "n", count: 65), " padded"] {
            #expect(
                try api.register(user: "alice", key: key, name: name).errorCode == "invalid_request", "name \(name)")
        }
        #expect(try api.register(user: "alice", key: key, name: "Älices Laptop ✓").status == 201)
        let garbage = try api.register(
            user: "bob", key: key, publicKeyPEM: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
        #expect(garbage.status == 400)
        #expect(garbage.errorCode == "invalid_request")
    }

    @Test("a wrong content type gives 400 invalid_request")
    func wrongContentType() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let body: JSONValue = .object([
            "user": "alice", "name": "n", "public_key": .string(key.publicKey.pemRepresentation),
            "proof": .string(try api.assertion(key)),
        ])
        for headers: HTTPHeaders in [
            ["Content-Type": "text/plain"], [:], ["Content-Type": "application/x-www-form-urlencoded"],
        ] {
            let response = try api.registerBody(body, headers: headers)
            #expect(response.status == 400)
            #expect(response.errorCode == "invalid_request")
        }
        let withCharset = try api.registerBody(body, headers: ["content-type": "Application/JSON; charset=utf-8"])
        #expect(withCharset.status == 201)
    }
}
