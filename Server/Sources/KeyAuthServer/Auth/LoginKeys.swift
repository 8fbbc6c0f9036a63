import KeyAuth
import Synchronization

/// The key a login's signature is verified with (PROTOCOL.md section 2, rules 3 and 4): the
/// registered device's key when it can check the signature, a decoy otherwise.
///
/// An unknown and a revoked device get a decoy key of the presented signature's size
/// (``DecoyKeys``), so that refusing them costs the same RSA verification as a registered key
/// with a bad signature and gets the same answer: nobody can probe which keys exist or were
/// revoked. A registered key that could not even start verifying the signature (another length,
/// or a value not below its modulus, which OpenSSL refuses at once) is swapped for that decoy
/// too, so that the cost of a failure depends only on the signature presented, never on
/// whether or which key is registered.
///
/// The device record is read on every login, so a revocation holds at once, even for
/// assertions signed before it; only the parsing of its key is cached (``DeviceKeyCache``).
struct LoginKeys: Sendable {
    /// Parsed device keys, shared by every login.
    let cache: DeviceKeyCache
    /// The stand-ins for unknown and revoked keys.
    let decoys: DecoyKeys

    /// The key to verify `signature` with, for the device registered under the assertion's key
    /// id (nil when there is none).
    ///
    /// - Returns: the key, and the device when the key is its own (nil for a decoy).
    /// - Throws: ``StoredKeyUnreadable`` when a registered device's stored key no longer parses,
    ///   ``DecoyUnavailable`` when a decoy cannot be made: the server's problem, a 500.
    func key(for device: DeviceRecord?, signature: [UInt8]) throws -> (key: RSAPublicKey, device: DeviceRecord?) {
        guard let device, device.status != .revoked else {
            return (try decoys.key(byteCount: signature.count), nil)
        }
        let key: RSAPublicKey
        let hasROCAFingerprint: Bool
        do {
            (key, hasROCAFingerprint) = try cache.key(kid: device.kid, pem: device.publicKeyPEM)
        } catch {
            // A stored key that no longer parses is the server's problem, not a bad assertion.
            throw StoredKeyUnreadable(kid: device.kid)
        }
        // A key registered before such keys were refused proves nothing: anyone can compute its
        // private key. It is refused as a revoked one is.
        guard !hasROCAFingerprint, key.modulus.count == signature.count,
            signature.lexicographicallyPrecedes(key.modulus)
        else {
            return (try decoys.key(byteCount: signature.count), nil)
        }
        return (key, device)
    }
}

/// Public keys no one can sign for, one per signature length, that stand in for unknown and
/// revoked keys so that refusing them costs a full RSA verification of that size.
///
/// A decoy needs no private key, only a modulus of the right size: a random odd number with
/// e = 65537 costs the same public-key operation as a real key's product of two primes, and
/// is made in microseconds where a real 8192-bit key pair would take minutes. Each is made on
/// first use and kept for the life of the process (at most one per length from 256 to 1024
/// bytes).
///
/// The top 64 bits of each modulus are set, so a real modulus of the same length is smaller
/// (but for a chance of 2^-64): every signature below a real key's modulus is below the
/// decoy's too. Together with the swap in ``LoginKeys``, a signature is refused at once
/// exactly when it is not below the decoy's modulus, whether its key is registered or not.
///
/// - Warning: a decoy only hides which keys exist while nobody can sign for it, that is while
///   its modulus stays unfactored. A random modulus is likely to have small prime factors but
///   unlikely to be fully factorable; it lives only as long as the process.
final class DecoyKeys: Sendable {
    /// The decoys of this process.
    static let shared = DecoyKeys()

    private let keys = Mutex<[Int: RSAPublicKey]>([:])

    /// The decoy for signatures of `byteCount` bytes.
    ///
    /// - Throws: ``DecoyUnavailable`` when the random generator or OpenSSL fails (a 500: an
    ///   `invalid_grant` would be the one answer that differs from a registered key's).
    func key(byteCount: Int) throws(DecoyUnavailable) -> RSAPublicKey {
        if let key = keys.withLock({ $0[byteCount] }) { return key }
        let key = try Self.make(byteCount: byteCount)
        return keys.withLock { keys in
            if let existing = keys[byteCount] { return existing }
            keys[byteCount] = key
            return key
        }
    }

    /// Makes the decoys for `byteCounts` now, so that no request pays for them.
    func prepare(_ byteCounts: [Int]) throws(DecoyUnavailable) {
        for byteCount in byteCounts {
            _ = try key(byteCount: byteCount)
        }
    }

    private static func make(byteCount: Int) throws(DecoyUnavailable) -> RSAPublicKey {
        guard byteCount >= 16 else { throw DecoyUnavailable(byteCount: byteCount) }
        do {
            var modulus = try CryptoPrimitives.randomBytes(count: byteCount)
            for index in 0..<8 { modulus[index] = 0xFF }
            modulus[byteCount - 1] |= 1
            return try RSAPublicKey(modulus: modulus, exponent: [0x01, 0x00, 0x01])
        } catch {
            throw DecoyUnavailable(byteCount: byteCount)
        }
    }
}

/// A decoy key could not be made: the random generator or OpenSSL failed.
struct DecoyUnavailable: Error, Sendable {
    let byteCount: Int
}

/// A registered device's stored public key cannot be parsed: a 500, never an `invalid_grant`.
struct StoredKeyUnreadable: Error, Sendable {
    let kid: String
}
