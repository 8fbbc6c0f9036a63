/// An Ed25519 public key: what verifies EdDSA signatures (RFC 8037 section 3.1).
public struct Ed25519PublicKey: Sendable, Hashable, CustomStringConvertible {
    let key: EVPKey
    /// The 32 bytes of the key (RFC 8032 section 5.1.5).
    public let rawRepresentation: [UInt8]
    /// The RFC 7638 thumbprint (over `crv`, `kty` and `x`, RFC 8037 section 2), computed once
    /// when the key is built.
    public let thumbprint: String

    init(owning key: EVPKey) throws(KeyAuthError) {
        guard key.isCurve(.ed25519) else { throw KeyAuthError(.keyRejected, "the key is not an Ed25519 key") }
        self.key = key
        rawRepresentation = try key.rawPublicKey()
        thumbprint = try JWK(octetKeyPair: "Ed25519", x: Base64URL.encode(rawRepresentation)).thumbprint()
    }

    /// Builds a key from its 32 bytes.
    ///
    /// - Throws: `.keyCorrupt` for another length.
    public init(rawRepresentation bytes: [UInt8]) throws(KeyAuthError) {
        try self.init(owning: EVPKey.ed25519PublicKey(bytes))
    }

    /// Builds a key from a JWK with `kty` `OKP`, `crv` `Ed25519` and `x`.
    ///
    /// - Throws: `.keyCorrupt` for another key type or curve, or an `x` that does not decode.
    public init(jwk: JWK) throws(KeyAuthError) {
        guard jwk.keyType == "OKP", jwk.curve == "Ed25519", let x = jwk.x.flatMap(Base64URL.decode) else {
            throw KeyAuthError(.keyCorrupt, "not an Ed25519 OKP JWK")
        }
        try self.init(rawRepresentation: x)
    }

    /// Reads a DER SubjectPublicKeyInfo.
    public init(derRepresentation der: [UInt8]) throws(KeyAuthError) {
        try self.init(owning: EVPKey.readPublicKey(der: der))
    }

    /// The public key as a JWK (`kty` `OKP`, `crv` `Ed25519`, `x`).
    public var jwk: JWK { JWK(octetKeyPair: "Ed25519", x: Base64URL.encode(rawRepresentation)) }

    /// Whether `signature` (64 bytes) is a valid Ed25519 signature of `message`.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard signature.count == 64 else { return false }
        return key.digestVerify(signature, for: message, digest: nil)
    }

    public static func == (lhs: Ed25519PublicKey, rhs: Ed25519PublicKey) -> Bool {
        lhs.rawRepresentation == rhs.rawRepresentation
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(rawRepresentation)
    }

    public var description: String { "Ed25519PublicKey(\(thumbprint))" }
}
