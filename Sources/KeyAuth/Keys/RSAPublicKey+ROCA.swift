extension RSAPublicKey {
    /// Whether the modulus has the fingerprint of the keys Infineon's RSA library made before
    /// its 2017 fix (ROCA, CVE-2017-15361): TPMs and smart cards of that firmware made primes
    /// `k * M + (65537^a mod M)`, where `M` is the product of the first primes, and the private
    /// key of such a modulus can be computed from the public key. A key that has it is no device
    /// key, nor a TPM's endorsement or attestation key, whatever else it proves.
    ///
    /// The fingerprint: modulo each prime from 3 to 167 (every `M` has them all), a ROCA
    /// modulus lies in the subgroup that 65537 generates. A key made otherwise passes that test
    /// for all of them by chance about once in 240 million; such a key is refused too, and the
    /// refusal says to make a new one.
    public var hasROCAFingerprint: Bool { ROCAFingerprint.matches(modulus) }
}

/// The residue tables of ``RSAPublicKey/hasROCAFingerprint``.
enum ROCAFingerprint {
    /// For each prime where 65537 does not generate every nonzero residue (where the test can
    /// tell keys apart), which residues lie in its subgroup.
    static let subgroups: [(prime: UInt64, members: [Bool])] = {
        let primes = (3...167).filter { candidate in (2..<candidate).allSatisfy { candidate % $0 != 0 } }
        return primes.compactMap { prime in
            var members = [Bool](repeating: false, count: prime)
            var power = 1
            repeat {
                members[power] = true
                power = power * (65537 % prime) % prime
            } while power != 1
            let count = members.lazy.filter { $0 }.count
            return count == prime - 1 ? nil : (UInt64(prime), members)
        }
    }()

    /// Whether `modulus` (big-endian) is in every subgroup. Most keys leave at the first prime
    /// (11, where 65537 generates only 1 and 10), after one pass over the modulus.
    static func matches(_ modulus: [UInt8]) -> Bool {
        subgroups.allSatisfy { prime, members in
            // Reduced every seven bytes: a remainder under 2^8 shifted by 56 bits still fits.
            var remainder: UInt64 = 0
            var unreduced = 0
            for byte in modulus {
                remainder = remainder << 8 | UInt64(byte)
                unreduced += 1
                if unreduced == 7 {
                    remainder %= prime
                    unreduced = 0
                }
            }
            return members[Int(remainder % prime)]
        }
    }
}
