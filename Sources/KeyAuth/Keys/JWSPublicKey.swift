/// A public key that verifies JWS signatures, with the one algorithm its type allows: RS256 for
/// RSA, ES256 for P-256, EdDSA for Ed25519.
///
/// Verifiers take the algorithm from here, never from a token: a token whose `alg` is not the
/// key's algorithm is refused before its signature is looked at, so an RSA key can never be
/// used as an HMAC secret, nor a P-256 key for anything but ES256 (the algorithm-confusion
/// attacks of RFC 8725 section 2.1).
public enum JWSPublicKey: Sendable, Hashable, CustomStringConvertible {
    /// An RSA key, for RS256.
    case rsa(RSAPublicKey)
    /// An EC P-256 key, for ES256.
    case p256(P256PublicKey)
    /// An Ed25519 key, for EdDSA.
    case ed25519(Ed25519PublicKey)

    /// Builds the key a JWK describes (`kty` `RSA`, `EC` with `crv` `P-256`, or `OKP` with
    /// `crv` `Ed25519`).
    ///
    /// - Throws: `.keyCorrupt` for another key type or curve, or members that do not decode.
    public init(jwk: JWK) throws(KeyAuthError) {
        switch jwk.keyType {
        case "RSA": self = .rsa(try RSAPublicKey(jwk: jwk))
        case "EC": self = .p256(try P256PublicKey(jwk: jwk))
        case "OKP": self = .ed25519(try Ed25519PublicKey(jwk: jwk))
        default: throw KeyAuthError(.keyCorrupt, "the key type must be RSA, EC or OKP")
        }
    }

    /// The only algorithm this key verifies.
    public var algorithm: JWSAlgorithm {
        switch self {
        case .rsa: .rs256
        case .p256: .es256
        case .ed25519: .edDSA
        }
    }

    /// The public key as a JWK.
    public var jwk: JWK {
        switch self {
        case .rsa(let key): key.jwk
        case .p256(let key): key.jwk
        case .ed25519(let key): key.jwk
        }
    }

    /// The RFC 7638 thumbprint.
    public var thumbprint: String {
        switch self {
        case .rsa(let key): key.fingerprint
        case .p256(let key): key.thumbprint
        case .ed25519(let key): key.thumbprint
        }
    }

    /// Whether `signature` is a valid signature of `message` under this key's algorithm.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        switch self {
        case .rsa(let key): key.isValidSignature(signature, for: message)
        case .p256(let key): key.isValidSignature(signature, for: message)
        case .ed25519(let key): key.isValidSignature(signature, for: message)
        }
    }

    public var description: String {
        switch self {
        case .rsa(let key): key.description
        case .p256(let key): key.description
        case .ed25519(let key): key.description
        }
    }
}
