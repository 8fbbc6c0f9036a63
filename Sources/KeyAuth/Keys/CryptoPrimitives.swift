internal import CKeyAuthOpenSSL

/// Digests, random bytes, constant-time comparison and wiping, over OpenSSL: shared by the
/// library, the command and the server. Not named `Crypto`, which would shadow swift-crypto.
package enum CryptoPrimitives {
    /// SHA-256 of `data`.
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL fails (never a trap: on a server, one request
    ///   fails with 500 and every other goes on).
    package static func sha256(_ data: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try OpenSSL.sha256Digest(data)
    }

    /// HMAC-SHA-256 of `message` under `key` (RFC 2104): what the server's DPoP nonces carry.
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL fails.
    package static func hmacSHA256(key: [UInt8], message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = output.withUnsafeMutableBytes { out in
            key.withUnsafeBytes { secret in
                message.withUnsafeBytes { input in
                    HMAC(
                        OpenSSL.sha256, secret.baseAddress, Int32(secret.count),
                        input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count,
                        out.baseAddress?.assumingMemoryBound(to: UInt8.self), &length)
                }
            }
        }
        guard ok != nil, length == 32 else { throw OpenSSL.error(.cryptoFailed, "HMAC-SHA-256 failed") }
        return output
    }

    /// PBKDF2-HMAC-SHA-256 of `password` with `salt` (RFC 8018 section 5.2), `length` bytes.
    ///
    /// A slow hash for secrets a person may copy from paper (recovery codes): each guess against
    /// a stolen hash costs `iterations` HMACs.
    /// - Throws: `.cryptoFailed` when OpenSSL fails or an argument does not fit its `int`s.
    package static func pbkdf2SHA256(
        password: [UInt8], salt: [UInt8], iterations: Int, length: Int = 32
    ) throws(KeyAuthError) -> [UInt8] {
        guard let passwordLength = Int32(exactly: password.count), let saltLength = Int32(exactly: salt.count),
            let rounds = Int32(exactly: iterations), rounds > 0, let keyLength = Int32(exactly: length), keyLength > 0
        else { throw KeyAuthError(.cryptoFailed, "PBKDF2 arguments out of range") }
        var output = [UInt8](repeating: 0, count: length)
        let ok = output.withUnsafeMutableBytes { out in
            password.withUnsafeBytes { secret in
                salt.withUnsafeBytes { saltBytes in
                    PKCS5_PBKDF2_HMAC(
                        secret.baseAddress?.assumingMemoryBound(to: CChar.self), passwordLength,
                        saltBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), saltLength, rounds, OpenSSL.sha256,
                        keyLength, out.baseAddress?.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        guard ok == 1 else { throw OpenSSL.error(.cryptoFailed, "PBKDF2-HMAC-SHA-256 failed") }
        return output
    }

    /// Random bytes from OpenSSL's CSPRNG.
    package static func randomBytes(count: Int) throws(KeyAuthError) -> [UInt8] {
        try OpenSSL.randomBytes(count: count)
    }

    /// Compares two secrets (or digests of secrets) without leaking where they differ.
    package static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        OpenSSL.constantTimeEquals(lhs, rhs)
    }

    /// Overwrites a buffer that held a secret.
    package static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { OpenSSL.cleanse($0) }
    }
}
