/// Moduli with the ROCA fingerprint (CVE-2017-15361), for tests of the checks that refuse them.
///
/// A real ROCA key is `p * q` with primes of the shape `k * M + (65537^a mod M)`; the checks
/// look only at the modulus's residues modulo the primes 3 to 167, so a number congruent to 1
/// modulo each of them (1 is in every subgroup 65537 generates) has the fingerprint without
/// being anyone's key.
public enum ROCAShapedModulus {
    /// An odd number of exactly `bits` bits (a multiple of 8, at least 256) that is 1 modulo
    /// every prime from 3 to 167, big-endian.
    public static func make(bits: Int) -> [UInt8] {
        // The product of the primes, about 2^218, in little-endian bytes while it is built.
        var product: [UInt8] = [1]
        for prime in (3...167) where (2..<prime).allSatisfy({ prime % $0 != 0 }) {
            var carry = 0
            for index in product.indices {
                let value = Int(product[index]) * prime + carry
                product[index] = UInt8(value & 0xFF)
                carry = value >> 8
            }
            while carry > 0 {
                product.append(UInt8(carry & 0xFF))
                carry >>= 8
            }
        }
        // Shifted left so that its top bit is the number's top bit: an even multiple, then + 1.
        let productBits = (product.count - 1) * 8 + (8 - (product.last ?? 1).leadingZeroBitCount)
        let shift = bits - productBits
        let bytesShift = shift / 8
        let bitShift = shift % 8
        var shifted = [UInt8](repeating: 0, count: bits / 8)
        for (index, byte) in product.enumerated() {
            let wide = UInt16(byte) << bitShift
            shifted[index + bytesShift] |= UInt8(wide & 0xFF)
            if index + bytesShift + 1 < shifted.count { shifted[index + bytesShift + 1] |= UInt8(wide >> 8) }
        }
        shifted[0] |= 1
        return shifted.reversed()
    }
}
