import KeyAuth
import KeyAuthTestSupport
import Testing

@Suite("Keys with the ROCA fingerprint (CVE-2017-15361)")
struct ROCAFingerprintTests {
    @Test("a modulus in every subgroup of 65537 modulo the primes 3 to 167 has the fingerprint")
    func shapedModulusMatches() throws {
        for bits in [2048, 3072] {
            let modulus = ROCAShapedModulus.make(bits: bits)
            let key = try RSAPublicKey(modulus: modulus, exponent: [0x01, 0x00, 0x01])
            #expect(key.bits == bits)
            #expect(key.hasROCAFingerprint)
        }
    }

    @Test("keys OpenSSL makes do not have it, nor one that differs from a ROCA modulus by two")
    func ordinaryKeysDoNot() throws {
        for key in [
            TestKeys.first.publicKey, TestKeys.second.publicKey, try RSAPrivateKey.generate(bits: 2048).publicKey,
        ] {
            #expect(!key.hasROCAFingerprint)
        }
        // 3 modulo 11, where 65537 generates only {1, 10}.
        var modulus = ROCAShapedModulus.make(bits: 2048)
        modulus[modulus.count - 1] += 2
        #expect(!(try RSAPublicKey(modulus: modulus, exponent: [0x01, 0x00, 0x01]).hasROCAFingerprint))
    }
}
