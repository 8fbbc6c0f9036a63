/// Digests, random bytes, constant-time comparison and wiping, over OpenSSL: shared by the
/// library, the command and the server. Not named `Crypto`, which would shadow swift-crypto.
package enum CryptoPrimitives {
    /// SHA-256 of `data`.
    package static func sha256(_ data: [UInt8]) -> [UInt8] {
        OpenSSL.sha256Digest(data)
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
