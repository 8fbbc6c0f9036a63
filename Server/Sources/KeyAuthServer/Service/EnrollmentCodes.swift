import KeyAuth

/// One-time enrollment codes: issued by `keyauth-server enroll USER`, used once at
/// registration by that user only.
///
/// A code is 128 random bits in base64url (22 characters). Storage keeps only its SHA-256, so
/// reading the database does not reveal usable codes; 128 bits make guessing hopeless even
/// without the rate limit, so a plain hash (no salt or stretching) is enough.
package struct EnrollmentCodes: Sendable {
    /// Random bytes per code.
    package static let codeBytes = 16

    let storage: any ServerStorage
    let lifetime: Int64
    let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - storage: where code hashes are kept.
    ///   - lifetime: seconds a code stays valid (15 minutes by default).
    ///   - now: the clock.
    package init(
        storage: any ServerStorage, lifetime: Int64 = 900, now: @escaping @Sendable () -> Int64 = ServerClock.now
    ) {
        self.storage = storage
        self.lifetime = lifetime
        self.now = now
    }

    /// Creates a code for `user`, stores its hash and records the issue in the audit trail
    /// (without the code).
    ///
    /// - Returns: the code, to show once to the administrator and never again.
    /// - Throws: ``ServerConfigurationError`` for an invalid user name, ``StorageError``, or
    ///   `KeyAuthError` when the random generator fails.
    package func issue(for user: String, by actor: AuditActor = .administrator) throws -> String {
        guard InputRules.isValidUser(user) else {
            throw ServerConfigurationError("the user name must be \(InputRules.userRule)")
        }
        let code = Base64URL.encode(try CryptoPrimitives.randomBytes(count: Self.codeBytes))
        try storage.insertEnrollmentCode(hash: try Self.hash(code), user: user, expiresAt: now() + lifetime)
        try AuditTrail(storage: storage, now: now).record(.enroll, by: actor, user: user)
        return code
    }

    /// Uses up `code` for `user`; false when it is unknown, used, expired or another user's.
    func consume(_ code: String, user: String) throws -> Bool {
        try storage.consumeEnrollmentCode(hash: try Self.hash(code), user: user, now: now())
    }

    /// The stored form of a code.
    static func hash(_ code: String) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.sha256(Array(code.utf8))
    }
}
