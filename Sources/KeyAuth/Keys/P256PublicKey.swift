/// An EC public key on P-256: what verifies ES256 signatures (RFC 7518 section 3.4).
///
/// Built only from key material a caller chose to trust (a JWK set it fetched, a proof's own
/// `jwk` that a DPoP check then binds to a token), never from a token header a verifier did not
/// ask for.
public struct P256PublicKey: Sendable, Hashable, CustomStringConvertible {
    let key: EVPKey
    /// The uncompressed point, `04 || x || y`.
    public let uncompressedPoint: [UInt8]
    /// The RFC 7638 thumbprint, computed once when the key is built.
    public let thumbprint: String

    init(owning key: EVPKey) throws(KeyAuthError) {
        guard key.isCurve(.p256) else { throw KeyAuthError(.keyRejected, "the key is not an EC P-256 key") }
        self.key = key
        uncompressedPoint = try key.rawPublicKey()
        guard uncompressedPoint.count == 65 else {
            throw KeyAuthError(.keyCorrupt, "the P-256 key is not an uncompressed point")
        }
        thumbprint = try Self.jwk(of: uncompressedPoint).thumbprint()
    }

    /// Builds a key from its coordinates, as a JWK carries them (32 bytes each).
    ///
    /// - Throws: `.keyCorrupt` for coordinates of another length or a point not on the curve.
    public init(x: [UInt8], y: [UInt8]) throws(KeyAuthError) {
        guard x.count == 32, y.count == 32 else {
            throw KeyAuthError(.keyCorrupt, "P-256 coordinates are 32 bytes each")
        }
        try self.init(owning: EVPKey.p256PublicKey(uncompressedPoint: [0x04] + x + y))
    }

    /// Builds a key from a JWK with `kty` `EC`, `crv` `P-256`, `x` and `y`.
    ///
    /// - Throws: `.keyCorrupt` for another key type or curve, or members that do not decode.
    public init(jwk: JWK) throws(KeyAuthError) {
        guard jwk.keyType == "EC", jwk.curve == "P-256", let x = jwk.x.flatMap(Base64URL.decode),
            let y = jwk.y.flatMap(Base64URL.decode)
        else { throw KeyAuthError(.keyCorrupt, "not a P-256 EC JWK") }
        try self.init(x: x, y: y)
    }

    /// Reads a DER SubjectPublicKeyInfo.
    public init(derRepresentation der: [UInt8]) throws(KeyAuthError) {
        try self.init(owning: EVPKey.readPublicKey(der: der))
    }

    /// SubjectPublicKeyInfo DER.
    public var derRepresentation: [UInt8] {
        get throws(KeyAuthError) { try key.publicKeyDER() }
    }

    /// The public key as a JWK (`kty` `EC`, `crv` `P-256`, `x`, `y`).
    public var jwk: JWK { Self.jwk(of: uncompressedPoint) }

    private static func jwk(of point: [UInt8]) -> JWK {
        JWK(ellipticCurve: "P-256", x: Base64URL.encode(point[1...32]), y: Base64URL.encode(point[33...64]))
    }

    /// Whether `signature`, the 64-byte `r || s` of a JWS, is a valid ECDSA P-256 SHA-256
    /// signature of `message`. Any other length is invalid.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard let der = ECDSASignatureEncoding.der(fromRaw: signature) else { return false }
        return SHA256Signatures.verify(key, signature: der, message: message)
    }

    public static func == (lhs: P256PublicKey, rhs: P256PublicKey) -> Bool {
        lhs.uncompressedPoint == rhs.uncompressedPoint
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(uncompressedPoint)
    }

    public var description: String { "P256PublicKey(\(thumbprint))" }
}
