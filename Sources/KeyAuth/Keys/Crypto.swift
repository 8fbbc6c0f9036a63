/// Small cryptographic utilities shared by the library, the command and the server.
public enum Crypto {
    /// SHA-256 of `data`.
    public static func sha256(_ data: [UInt8]) -> [UInt8] {
        OpenSSL.sha256Digest(data)
    }

    /// Random bytes from OpenSSL's CSPRNG.
    public static func randomBytes(count: Int) throws(KeyAuthError) -> [UInt8] {
        try OpenSSL.randomBytes(count: count)
    }

    /// Compares two secrets (or digests of secrets) without leaking where they differ.
    public static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        OpenSSL.constantTimeEquals(lhs, rhs)
    }

    /// Overwrites a buffer that held a secret.
    public static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { OpenSSL.cleanse($0) }
    }
}
