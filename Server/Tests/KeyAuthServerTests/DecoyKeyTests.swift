import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// Unknown and registered keys must cost the same to refuse. Timing itself is measured by
/// `Benchmarks/timing/run.sh`, not here; these tests check what decides the cost: which key a
/// signature is verified with, and that refused lengths never reach the registry.
@Suite("Login probing: signature lengths and decoy keys")
struct DecoyKeyTests {
    /// `assertion` with its signature replaced by `signature`.
    private func resigned(_ assertion: String, _ signature: [UInt8]) throws -> String {
        let dot = try #require(assertion.lastIndex(of: "."))
        return assertion[...dot] + Base64URL.encode(signature)
    }

    @Test("a signature shorter than 256 or longer than 1024 bytes is refused as invalid_grant before any lookup")
    func lengthsRefusedBeforeLookup() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let assertion = try api.assertion(key)
        // With the storage closed, any request that reaches the registry gets 503.
        api.storage.close()
        for length in [1, 128, 255, 1025, 2048] {
            let response = try api.login(
                assertion: try resigned(assertion, [UInt8](repeating: 0x01, count: length)))
            #expect(response.status == 400, "length \(length)")
            #expect(response.errorCode == "invalid_grant", "length \(length)")
            #expect(response.errorDescription == DeviceAssertionVerifier.uniformFailure, "length \(length)")
        }
        for length in [256, 384, 1024] {
            let response = try api.login(
                assertion: try resigned(assertion, [UInt8](repeating: 0x01, count: length)))
            #expect(response.status == 503, "length \(length) must reach the registry")
        }
    }

    @Test("an unknown or revoked key is verified against a decoy of the signature's size")
    func decoyForUnknownAndRevoked() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        let revoked = try ServerTestKeys.key("alice-2")
        #expect(
            try storage.insertDevice(
                DeviceRecord(
                    kid: revoked.publicKey.fingerprint, user: "alice", name: "old",
                    publicKeyPEM: revoked.publicKey.pemRepresentation, status: .revoked,
                    createdAt: environment.clock.now)))
        for length in [256, 257, 384, 512, 1024] {
            let signature = [UInt8](repeating: 0x01, count: length)
            for kid in [try ServerTestKeys.key("stranger").publicKey.fingerprint, revoked.publicKey.fingerprint] {
                let loginKeys = LoginKeys(cache: DeviceKeyCache(), decoys: .shared)
                let (key, device) = try loginKeys.key(for: try storage.device(kid: kid), signature: signature)
                #expect(key.modulus.count == length)
                #expect(Array(key.modulus.prefix(8)) == [UInt8](repeating: 0xFF, count: 8))
                #expect(key.modulus.last.map { $0 & 1 } == 1)
                #expect(key.exponent == [0x01, 0x00, 0x01])
                #expect(key == (try DecoyKeys.shared.key(byteCount: length)))
                #expect(device == nil)
            }
        }
    }

    @Test("a registered key that could not verify the signature at all is swapped for the decoy")
    func registeredKeySwappedForDecoy() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        let key = try ServerTestKeys.key("alice-1")
        let kid = key.publicKey.fingerprint
        #expect(
            try storage.insertDevice(
                DeviceRecord(
                    kid: kid, user: "alice", name: "laptop", publicKeyPEM: key.publicKey.pemRepresentation,
                    status: .active, createdAt: environment.clock.now)))
        func lookUp(_ signature: [UInt8]) throws -> (RSAPublicKey?, DeviceRecord?) {
            let loginKeys = LoginKeys(cache: DeviceKeyCache(), decoys: .shared)
            return try loginKeys.key(for: try storage.device(kid: kid), signature: signature)
        }
        // A signature the key can check: the key itself.
        let real = try key.signature(for: Array("message".utf8))
        let (found, device) = try lookUp(real)
        #expect(found == key.publicKey)
        #expect(device?.kid == kid)
        // Another length, or a value not below the modulus: OpenSSL would refuse at once, an
        // unknown key would not.
        for signature in [
            [UInt8](repeating: 0x01, count: 384), [UInt8](repeating: 0xFF, count: 256), key.publicKey.modulus,
        ] {
            let (swapped, none) = try lookUp(signature)
            #expect(swapped == (try DecoyKeys.shared.key(byteCount: signature.count)))
            #expect(none == nil)
        }
    }

    @Test("a device key with the ROCA fingerprint, stored before such keys were refused, gets a decoy")
    func rocaKeyGetsADecoy() throws {
        let roca = try RSAPublicKey(modulus: ROCAShapedModulus.make(bits: 2048), exponent: [0x01, 0x00, 0x01])
        let device = DeviceRecord(
            kid: roca.fingerprint, user: "alice", name: "old card", publicKeyPEM: roca.pemRepresentation,
            status: .active, createdAt: 1)
        let signature = [UInt8](repeating: 0x01, count: 256)
        let (key, found) = try LoginKeys(cache: DeviceKeyCache(), decoys: .shared).key(
            for: device, signature: signature)
        #expect(found == nil, "the device's own key was used")
        #expect(key == (try DecoyKeys.shared.key(byteCount: 256)))
    }

    @Test("a decoy verifies nothing, and a login against one gets the unknown key's answer")
    func decoyVerifiesNothing() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let message = Array("header.payload".utf8)
        let signature = try key.signature(for: message)
        #expect(try !DecoyKeys.shared.key(byteCount: signature.count).isValidSignature(signature, for: message))

        let unknown = try api.login(ServerTestKeys.key("stranger"))
        let wrongLength = try api.login(
            assertion: try resigned(try api.assertion(key), [UInt8](repeating: 0x01, count: 384)))
        #expect(wrongLength.status == 400)
        #expect(wrongLength.body == unknown.body)
    }
}
