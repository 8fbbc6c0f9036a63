import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@Suite("EC P-256 and Ed25519 keys", .timeLimit(.minutes(10)))
struct CurveKeyTests {
    @Test("Wycheproof ECDSA P-256 SHA-256 (IEEE P1363 encoding): valid signatures verify, invalid ones fail")
    func wycheproofES256() throws {
        let file = try Vectors.load("wycheproof/ecdsa_secp256r1_sha256_p1363_test.json")
        var checked = 0
        var withJWK = 0
        for group in try #require(file["testGroups"]?.arrayValue) {
            let der = hexBytes(try #require(group["publicKeyDer"]?.stringValue))
            let key = try P256PublicKey(derRepresentation: der)
            #expect(try key.derRepresentation == der)
            // Most groups publish the key as a JWK too; where they do, it reads as the same key.
            if let published = group["publicKeyJwk"] {
                #expect(try JWSPublicKey(jwk: JWK(jsonValue: published)) == .p256(key))
                withJWK += 1
            }
            checked += try Self.checkVerification(group, isValid: key.isValidSignature)
        }
        #expect(checked > 250)
        #expect(withJWK > 0)
    }

    @Test("Wycheproof Ed25519: valid signatures verify, invalid ones fail")
    func wycheproofEd25519() throws {
        let file = try Vectors.load("wycheproof/ed25519_test.json")
        var checked = 0
        for group in try #require(file["testGroups"]?.arrayValue) {
            let jwk = try JWK(jsonValue: try #require(group["publicKeyJwk"]))
            let key = try Ed25519PublicKey(jwk: jwk)
            #expect(key.rawRepresentation == hexBytes(try #require(group["publicKey"]?["pk"]?.stringValue)))
            checked += try Self.checkVerification(group, isValid: key.isValidSignature)
        }
        #expect(checked >= 145)
    }

    @Test("RFC 8037 A.1 to A.4: the Ed25519 key's thumbprint and signature are reproduced byte for byte")
    func rfc8037() throws {
        let vector = try Vectors.load("rfc8037_a.json")
        let pem = try #require(vector["derived"]?["private_key_pkcs8_pem"]?.stringValue)
        let key = try Ed25519PrivateKey(pemRepresentation: Array(pem.utf8))
        let publicJWK = try JWK(jsonValue: try #require(vector["public_jwk"]))
        #expect(key.publicKey.jwk == publicJWK)
        #expect(publicJWK.canonicalJSON == vector["canonical_json_utf8"]?.stringValue)
        #expect(key.keyID == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k")
        let header = Array(try #require(vector["protected_header_utf8"]?.stringValue).utf8)
        let payload = Array(try #require(vector["payload_utf8"]?.stringValue).utf8)
        let token = try JWTBuilder.sign(headerJSON: header, payloadJSON: payload, key: key)
        #expect(token == vector["jws_compact"]?.stringValue)
        // The published token verifies with the public JWK alone, and only as EdDSA.
        let jws = try CompactJWS(parsing: token, algorithms: [.edDSA])
        #expect(jws.isSignatureValid(with: try JWSPublicKey(jwk: publicJWK)))
        #expect(throws: KeyAuthError.self) { try CompactJWS(parsing: token) }
    }

    @Test("a private JWK is refused where a public key is read")
    func privateJWKRefused() throws {
        let vector = try Vectors.load("rfc8037_a.json")
        #expect {
            try JWK(jsonValue: try #require(vector["private_jwk"]))
        } throws: { ($0 as? KeyAuthError)?.code == .keyRejected }
    }

    @Test("a P-256 point off the curve is refused")
    func pointOffCurve() throws {
        let key = try P256PrivateKey.generate().publicKey
        var y = Array(key.uncompressedPoint[33...64])
        y[31] ^= 1
        #expect {
            try P256PublicKey(x: Array(key.uncompressedPoint[1...32]), y: y)
        } throws: { ($0 as? KeyAuthError)?.code == .keyCorrupt }
    }

    @Test(
        "generated keys sign what their public JWK verifies, and survive PKCS#8 PEM", arguments: JWSAlgorithm.allCases)
    func roundTrip(algorithm: JWSAlgorithm) throws {
        let key = try JWSPrivateKey.generate(for: algorithm)
        #expect(key.algorithm == algorithm)
        let message = Array("header.payload".utf8)
        let signature = try key.signature(for: message)
        let published = try JWSPublicKey(jwk: try JWK(jsonValue: key.publicKey.jwk.jsonValue()))
        #expect(published == key.publicKey)
        #expect(published.algorithm == algorithm)
        #expect(published.isValidSignature(signature, for: message))
        #expect(!published.isValidSignature(signature, for: Array("header.payloaD".utf8)))
        var pem = try key.pkcs8PEM()
        defer { pem.withUnsafeMutableBytes { $0.initializeMemory(as: UInt8.self, repeating: 0) } }
        let reread = try JWSPrivateKey(pemRepresentation: pem)
        #expect(reread.publicKey == key.publicKey)
        #expect(reread.keyID == key.publicKey.thumbprint)
        if algorithm == .es256 { #expect(signature.count == 64) }
        if algorithm == .edDSA { #expect(try key.signature(for: message) == signature) }
    }

    @Test("a token's alg must be its key's: an ES256 signature under an RS256 or EdDSA header is refused")
    func algorithmPinnedToKey() throws {
        let key = try P256PrivateKey.generate()
        let token = try JWTBuilder(key: key).sign()
        let jws = try CompactJWS(parsing: token, algorithms: Set(JWSAlgorithm.allCases))
        #expect(jws.algorithm == .es256)
        #expect(jws.isSignatureValid(with: .p256(key.publicKey)))
        let other = try Ed25519PrivateKey.generate()
        #expect(!jws.isSignatureValid(with: .ed25519(other.publicKey)))
        // The same signature bytes relabelled EdDSA: refused before any key would try them.
        let parts = token.split(separator: ".")
        let relabelled =
            Base64URL.encode(Array(#"{"alg":"EdDSA","typ":"JWT"}"#.utf8)) + "." + parts[1] + "." + parts[2]
        let confused = try CompactJWS(parsing: relabelled, algorithms: Set(JWSAlgorithm.allCases))
        #expect(!confused.isSignatureValid(with: .p256(key.publicKey)))
    }

    @Test("one P-256 key signs and verifies from many tasks at once, its reused contexts never crossed")
    func p256ConcurrentUse() async throws {
        let key = try P256PrivateKey.generate()
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for round in 0..<50 {
                        let message = Array("task \(task) round \(round)".utf8)
                        guard let signature = try? key.signature(for: message), signature.count == 64 else {
                            return false
                        }
                        var flipped = signature
                        flipped[round % 64] ^= 0x01
                        // A refused signature leaves its context fit for the next check.
                        guard key.publicKey.isValidSignature(signature, for: message),
                            !key.publicKey.isValidSignature(flipped, for: message),
                            !key.publicKey.isValidSignature(signature, for: message + [0])
                        else { return false }
                    }
                    return true
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(outcomes == Array(repeating: true, count: 8))
    }

    @Test("JWSPrivateKey refuses a key of another type or curve")
    func otherCurveRefused() throws {
        let scratch = TemporaryDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/p384.pem"
        let made = try ExternalCommand.run([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", path,
        ])
        #expect(made.status == 0, "\(made.errorOutput)")
        let pem = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        #expect {
            try JWSPrivateKey(pemRepresentation: pem)
        } throws: { ($0 as? KeyAuthError)?.code == .keyRejected }
        #expect {
            try P256PrivateKey(pemRepresentation: pem)
        } throws: { ($0 as? KeyAuthError)?.code == .keyRejected }
    }

    /// Checks every `valid` and `invalid` test of a Wycheproof verification group (`acceptable`
    /// ones are left out); returns how many were checked.
    private static func checkVerification(
        _ group: JSONValue, isValid: ([UInt8], [UInt8]) -> Bool
    ) throws -> Int {
        var checked = 0
        for test in try #require(group["tests"]?.arrayValue) {
            let id = test["tcId"]?.integerValue ?? 0
            let message = hexBytes(try #require(test["msg"]?.stringValue))
            let valid = isValid(hexBytes(try #require(test["sig"]?.stringValue)), message)
            switch test["result"]?.stringValue {
            case "valid": #expect(valid, "tcId \(id)")
            case "invalid": #expect(!valid, "tcId \(id)")
            default: continue
            }
            checked += 1
        }
        return checked
    }
}
