import KeyAuth

/// A recovery code as storage keeps it: a slow hash (PBKDF2-HMAC-SHA-256) under a salt of its
/// own, never the code.
///
/// The iteration count is kept with each code, so that a later version can raise it for new
/// codes while codes issued before still verify.
package struct RecoveryCodeRecord: Sendable, Hashable {
    /// The row's number, given by storage when the code is stored; 0 before.
    package var id: Int64
    /// The only user who may use it.
    package var user: String
    /// 16 random bytes, the same for every code of a set (a salt per code before 2026-12-04).
    package var salt: [UInt8]
    /// PBKDF2-HMAC-SHA-256 of the code's grouped upper-case form.
    package var hash: [UInt8]
    /// PBKDF2's iteration count for this code.
    package var iterations: Int64
    /// When the set it belongs to was made, in seconds since 1970.
    package var createdAt: Int64
    /// The key protection of the device that made the set, as storage found it when the set was
    /// stored (`pin` when no device did): a device these codes enrol keeps no more than this
    /// (``KeyProtection/lesser(_:_:)``). Nil for codes stored before the server kept it.
    package var keyProtection: KeyProtection?

    /// Creates a record.
    package init(
        id: Int64 = 0, user: String, salt: [UInt8], hash: [UInt8], iterations: Int64, createdAt: Int64,
        keyProtection: KeyProtection? = nil
    ) {
        self.id = id
        self.user = user
        self.salt = salt
        self.hash = hash
        self.iterations = iterations
        self.createdAt = createdAt
        self.keyProtection = keyProtection
    }
}
