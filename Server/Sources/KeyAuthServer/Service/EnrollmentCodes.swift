import KeyAuth

/// One-time enrollment codes: issued by `keyauth-server enroll USER`, used once at
/// registration by that user only.
///
/// A code is read out over a telephone or copied from a chat, so it is 20 characters of
/// Crockford's base32 (digits and upper-case letters without I, L, O and U, which read like 1, 0
/// and V) in groups of four, `7K3M-9QXT-...`: 100 random bits. It is accepted in any case, with
/// or without the dashes or spaces, and with `O`, `I` or `L` typed for `0` or `1`. Storage keeps
/// only the SHA-256 of its grouped upper-case form, so reading the database does not reveal
/// usable codes; 100 bits make guessing hopeless even without the rate limit, so a plain hash (no
/// salt or stretching) is enough. Codes issued before (22 base64url characters, hashed as typed)
/// stay valid until they expire.
package struct EnrollmentCodes: Sendable {
    /// Characters per code, without the dashes: 5 bits each.
    package static let codeLength = 20
    /// Crockford's base32 alphabet.
    private static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

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
        let code = try Self.makeCode()
        try storage.insertEnrollmentCode(hash: try Self.hash(code), user: user, expiresAt: now() + lifetime)
        try AuditTrail(storage: storage, now: now).record(.enroll, by: actor, user: user)
        return code
    }

    /// A new random code in the grouped form: 100 bits, easy to read out. Recovery codes have the
    /// same form, so that a person meets one kind of code.
    ///
    /// - Throws: `KeyAuthError` when the random generator fails.
    static func makeCode() throws(KeyAuthError) -> String {
        // 256 is a multiple of 32: the low five bits of a random byte are uniform.
        grouped(try CryptoPrimitives.randomBytes(count: codeLength).map { alphabet[Int($0 & 31)] })
    }

    /// The hashes `code` may be stored under: as typed (a code of the earlier form), then its
    /// canonical form when that differs. A registration uses the code up with its device's insert
    /// (``DeviceEnrollmentCode/enrollment(hashes:)``).
    static func storedForms(of code: String) throws -> [[UInt8]] {
        var forms = [try hash(code)]
        if let canonical = canonical(code), canonical != code { forms.append(try hash(canonical)) }
        return forms
    }

    /// The grouped upper-case form of a code typed in any case, with or without dashes or
    /// spaces, `O` for `0` and `I` or `L` for `1`; nil when it is not a code of this form.
    static func canonical(_ typed: String) -> String? {
        guard typed.utf8.count <= 64 else { return nil }
        var symbols: [Character] = []
        for character in typed.uppercased() where character != "-" && character != " " {
            let read: Character =
                switch character {
                case "O": "0"
                case "I", "L": "1"
                default: character
                }
            guard alphabet.contains(read) else { return nil }
            symbols.append(read)
        }
        return symbols.count == codeLength ? grouped(symbols) : nil
    }

    /// `symbols` in groups of four joined by dashes.
    private static func grouped(_ symbols: [Character]) -> String {
        stride(from: 0, to: symbols.count, by: 4).map { String(symbols[$0..<min($0 + 4, symbols.count)]) }
            .joined(separator: "-")
    }

    /// The stored form of a code.
    static func hash(_ code: String) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.sha256(Array(code.utf8))
    }
}
