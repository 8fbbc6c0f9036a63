import KeyAuth

/// An enrollment code as storage keeps it: its SHA-256 hash, never the code.
package struct EnrollmentCodeRecord: Sendable, Hashable {
    /// SHA-256 of the code.
    package var hash: [UInt8]
    /// The only user who may use it.
    package var user: String
    /// When it stops being valid, in seconds since 1970.
    package var expiresAt: Int64

    /// Creates a record.
    package init(hash: [UInt8], user: String, expiresAt: Int64) {
        self.hash = hash
        self.user = user
        self.expiresAt = expiresAt
    }

    /// A short name for the code in listings: the first 4 bytes of its hash in hex. It tells
    /// codes apart and reveals nothing of the code (a hash of 128 random bits).
    package var shortID: String {
        Hex.encode(hash.prefix(4))
    }
}
