import KeyAuth

/// A user's own one-time recovery codes (PROTOCOL.md section 4, "Recovery codes"): made by the
/// user on a device (or the account page, with a device's approval), shown once, and each able
/// to enrol one new device, active at once, when every device is lost.
///
/// A code has the enrollment codes' form (``EnrollmentCodes/makeCode()``: 20 symbols of
/// Crockford's base32 in groups of four, 100 random bits) and is typed as forgivingly. Unlike an
/// enrollment code it lives until used or replaced, on paper or in a password manager, so storage
/// keeps only a slow hash of it: PBKDF2-HMAC-SHA-256 under a salt random for the set, so that a
/// copy of the database gives no code without that work for each guess. The codes of a set share
/// the salt so that checking a typed code costs one derivation, not one per unused code: wrong
/// codes are what an attacker sends, and each derivation is about 40 ms of a core. Sharing it lets
/// a guess at a stolen table be tried against the set's ten codes at once, which takes 3.3 bits off
/// 100. A user with no codes costs the same derivation, so the time of an answer does not tell
/// whether they have any. Sets stored with a salt per code (before 2026-12-04) are still checked,
/// one derivation per distinct salt.
package struct RecoveryCodes: Sendable {
    /// Codes in a set.
    package static let count = 10
    /// PBKDF2 iterations for new codes: about 40 ms each on a current core. 100 random bits are
    /// out of a guesser's reach already; the count makes each guess against a stolen table cost
    /// what a stored password's would, while checking a typed code costs at most ten of them.
    package static let defaultIterations = 100_000
    /// Bytes of salt per code.
    static let saltLength = 16
    /// Iteration counts a stored code may have; one outside (a damaged row) never matches.
    static let acceptedIterations: ClosedRange<Int64> = 1...10_000_000

    let storage: any ServerStorage
    let iterations: Int
    /// Bounds the derivations of typed codes that run at once, whoever sends them.
    let gate: SlowHashGate
    let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - storage: where code hashes are kept.
    ///   - iterations: PBKDF2 iterations for new codes.
    ///   - gate: the bound on typed codes checked at once.
    ///   - now: the clock.
    package init(
        storage: any ServerStorage, iterations: Int = defaultIterations, gate: SlowHashGate = SlowHashGate(),
        now: @escaping @Sendable () -> Int64 = ServerClock.now
    ) {
        self.storage = storage
        self.iterations = max(iterations, 1)
        self.gate = gate
        self.now = now
    }

    /// Makes a new set of ``count`` codes for `user`, replacing every code of the old set, and
    /// records it in the audit trail (without the codes).
    ///
    /// - Parameter activeDevice: the device whose request or approval this is; the set is stored
    ///   only while it is still active (a revocation may land while the codes are hashed).
    /// - Returns: the codes, to show once and never again.
    /// - Throws: what ``makeSet(for:)`` and ``store(_:by:whileActive:)`` throw.
    func issue(for user: String, by actor: AuditActor, whileActive activeDevice: String? = nil) throws -> [String] {
        let set = try makeSet(for: user)
        try store(set, by: actor, whileActive: activeDevice)
        return set.codes
    }

    /// A new set of ``count`` codes for `user`, hashed in a slot of ``gate`` (the ten derivations
    /// cost about 0.4 s of a core, and any active device may ask), not yet stored.
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` for an invalid user name, `.busy` when the
    ///   gate has no free slot; `KeyAuthError` when the random generator or the KDF fails.
    func makeSet(for user: String) throws -> RecoveryCodeSet {
        guard InputRules.isValidUser(user) else {
            throw ServiceError(.invalidRequest, "the user name must be \(InputRules.userRule)")
        }
        let time = now()
        let salt = try CryptoPrimitives.randomBytes(count: Self.saltLength)
        return try gate.run {
            var set = RecoveryCodeSet(user: user, codes: [], records: [])
            for _ in 0..<Self.count {
                let code = try EnrollmentCodes.makeCode()
                set.codes.append(code)
                set.records.append(
                    RecoveryCodeRecord(
                        user: user, salt: salt, hash: try Self.hash(code, salt: salt, iterations: iterations),
                        iterations: Int64(iterations), createdAt: time))
            }
            return set
        }
    }

    /// Stores `set` in place of every code of its user's old set, and records it in the audit
    /// trail (without the codes), in one transaction.
    ///
    /// - Parameter activeDevice: the set is stored only while this device is still active.
    /// - Throws: ``ServiceError`` `.accessDenied` when `activeDevice` is no longer active;
    ///   ``StorageError``.
    func store(
        _ set: RecoveryCodeSet, by actor: AuditActor, whileActive activeDevice: String?,
        askedBy askingSession: [UInt8]? = nil
    ) throws {
        let time = now()
        let audit = AuditEvent(
            time: time, action: .recoveryCodes, actor: actor.description, user: set.user,
            detail: "\(Self.count) new codes")
        guard
            try storage.replaceRecoveryCodes(
                user: set.user, with: set.records, whileActive: activeDevice,
                askedBy: askingSession.map { ($0, time) }, audit: audit)
        else {
            throw ServiceError(
                .accessDenied,
                askingSession == nil
                    ? "the device is no longer active" : "the device or the session is no longer active")
        }
    }

    /// How many of `user`'s codes are left.
    func remaining(for user: String) throws(StorageError) -> Int {
        try storage.unusedRecoveryCodes(user: user).count
    }

    /// Uses up `typed` for `user`: true when it is one of their unused codes, which is now used.
    ///
    /// Text that is not a code of the form is refused before anything is hashed. A code of the
    /// form costs one derivation per group of ``derivations(of:)``, and one (thrown away) when the
    /// user has no codes, in a slot of ``gate``.
    ///
    /// - Throws: ``ServiceError`` `.busy` when the gate has no free slot (nothing is used up);
    ///   ``StorageError``; `KeyAuthError` when the KDF fails.
    func consume(_ typed: String, user: String) throws -> Bool {
        guard let code = try match(typed, user: user) else { return false }
        return try storage.consumeRecoveryCode(code, at: now())
    }

    /// The stored row of `user`'s unused recovery code `typed`, or nil; uses nothing up (a registration
    /// does that with its device's insert: ``DeviceEnrollmentCode/recovery(code:notice:audit:)``).
    ///
    /// - Throws: as ``consume(_:user:)``.
    func match(_ typed: String, user: String) throws -> RecoveryCodeRecord? {
        guard let canonical = EnrollmentCodes.canonical(typed) else { return nil }
        let groups = Self.derivations(of: try storage.unusedRecoveryCodes(user: user))
        let match = try gate.run { () throws -> RecoveryCodeRecord? in
            guard !groups.isEmpty else {
                _ = try Self.hash(canonical, salt: Self.noCodesSalt, iterations: iterations)
                return nil
            }
            for group in groups {
                let hash = try Self.hash(canonical, salt: group.salt, iterations: Int(group.iterations))
                if let stored = group.codes.first(where: { CryptoPrimitives.constantTimeEquals(hash, $0.hash) }) {
                    return stored
                }
            }
            return nil
        }
        return match
    }

    /// The stored codes a single derivation checks: those that share salt and iteration count,
    /// in the order first met. A row whose count is outside ``acceptedIterations`` (damaged) is
    /// left out, so it never matches.
    static func derivations(of stored: [RecoveryCodeRecord]) -> [RecoveryCodeDerivation] {
        var groups: [RecoveryCodeDerivation] = []
        for record in stored where acceptedIterations.contains(record.iterations) {
            if let index = groups.firstIndex(where: { $0.salt == record.salt && $0.iterations == record.iterations }) {
                groups[index].codes.append(record)
            } else {
                groups.append(RecoveryCodeDerivation(salt: record.salt, iterations: record.iterations, codes: [record]))
            }
        }
        return groups
    }

    /// The salt of the derivation for a user with no codes: any fixed value does, as its result
    /// is thrown away.
    private static let noCodesSalt = [UInt8](repeating: 0, count: saltLength)

    /// The stored form of a code (its grouped upper-case form).
    static func hash(_ code: String, salt: [UInt8], iterations: Int) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.pbkdf2SHA256(password: Array(code.utf8), salt: salt, iterations: iterations)
    }
}

/// A new set of recovery codes, made and hashed but not yet stored.
struct RecoveryCodeSet {
    /// Whose codes they are.
    let user: String
    /// The codes, to show once.
    var codes: [String]
    /// What storage keeps of them.
    var records: [RecoveryCodeRecord]
}

/// Stored recovery codes that one PBKDF2 derivation of a typed code checks.
struct RecoveryCodeDerivation: Equatable {
    /// The salt they share.
    let salt: [UInt8]
    /// The iteration count they share.
    let iterations: Int64
    /// The codes, compared in constant time with the derivation.
    var codes: [RecoveryCodeRecord]
}
