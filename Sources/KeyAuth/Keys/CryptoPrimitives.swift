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
