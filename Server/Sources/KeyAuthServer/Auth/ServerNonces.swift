import KeyAuth

/// The server's nonces: DPoP nonces (RFC 9449 section 8, `--dpop-nonce`), values a client must
/// put in its proofs so that a proof signed in advance is useless after the nonce's lifetime, and
/// TPM attestation nonces (PROTOCOL.md section 4, "Register"), which a TPM signs into its
/// statement so that an old attestation cannot be replayed.
///
/// A nonce is the time it was made and an HMAC of that time under a secret derived from the
/// current signing key; it is accepted for ``lifetime`` seconds under any published key's
/// secret. Nothing is stored: every instance holding the same keys makes and accepts the same
/// nonces, and a rotation only makes clients fetch a new nonce once the old key retires.
struct ServerNonces: Sendable {
    /// What the nonces are for, in the HMAC, so that a nonce of one purpose is never one of another.
    enum Purpose: String, Sendable {
        case dpop = "dpop-nonce"
        case attestation = "tpm-attestation-nonce"
    }

    /// Seconds a nonce is accepted.
    static let lifetime: Int64 = 300
    /// Seconds a nonce may come from the future (another instance's clock a little ahead).
    static let leeway: Int64 = 10

    let keys: ServerSigningKeys
    var purpose = Purpose.dpop

    /// A fresh nonce for `now`.
    ///
    /// - Throws: `KeyAuthError` when no key is loaded.
    func issue(now: Int64) throws(KeyAuthError) -> String {
        let secret = try keys.current(at: now).nonceSecret
        let time = Self.bytes(of: now)
        return Base64URL.encode(time + (try tag(secret: secret, time: time)))
    }

    /// Whether `nonce` is one of ours, made at most ``lifetime`` seconds ago.
    ///
    /// The tag is checked before the time is read: until then the time is only bytes a client
    /// chose. The time is then compared, never subtracted, so that even a nonce of ours from a
    /// clock far off cannot make the arithmetic trap.
    func isValid(_ nonce: String, now: Int64) -> Bool {
        secret(of: nonce, now: now) != nil
    }

    /// The secret of the key that made `nonce`, when the nonce is valid (``isValid(_:now:)``):
    /// what a value derived from the nonce (an attestation's activation secret) is keyed with,
    /// so that every instance derives the same one.
    func secret(of nonce: String, now: Int64) -> [UInt8]? {
        guard let bytes = Base64URL.decode(nonce), bytes.count == 24 else { return nil }
        let time = Array(bytes[0..<8])
        let received = Array(bytes[8...])
        let maker = keys.keys.first { key in
            guard let expected = try? tag(secret: key.nonceSecret, time: time) else { return false }
            return CryptoPrimitives.constantTimeEquals(expected, received)
        }
        guard let maker else { return nil }
        let issuedAt = time.reduce(Int64(0)) { $0 << 8 | Int64($1) }
        let (earliest, tooEarly) = now.subtractingReportingOverflow(Self.lifetime)
        let (latest, tooLate) = now.addingReportingOverflow(Self.leeway)
        let fresh = (tooEarly || issuedAt >= earliest) && (tooLate || issuedAt <= latest)
        return fresh ? maker.nonceSecret : nil
    }

    private static func bytes(of time: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: time >> (8 * (7 - $0))) }
    }

    private func tag(secret: [UInt8], time: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        Array(try CryptoPrimitives.hmacSHA256(key: secret, message: Array(purpose.rawValue.utf8) + time).prefix(16))
    }
}
