/// A JWS algorithm keyauth signs or verifies with (RFC 7518 section 3, RFC 8037 section 3.1).
///
/// A closed set on purpose: a verifier pins the algorithm to the kind of its key, never to what a
/// token's header says, so `none` and the HMAC family have no value here at all.
public enum JWSAlgorithm: String, Sendable, Hashable, CaseIterable {
    /// RSASSA-PKCS1-v1_5 with SHA-256: device assertions, and access tokens by default (RFC 9068
    /// requires every party to support it).
    case rs256 = "RS256"
    /// ECDSA on P-256 with SHA-256, the signature as the 64-byte `r || s` of RFC 7518.
    case es256 = "ES256"
    /// Ed25519 (RFC 8037).
    case edDSA = "EdDSA"
}

/// A private key that signs JWS signing inputs: a device key in a file or in a TPM, or a server's
/// token-signing key.
///
/// The signer owns its algorithm, so a builder writes the `alg` header from the key that signs
/// and can never announce one algorithm while signing with another. Implementations keep the
/// private half to themselves: the protocol hands out signatures and the key's ID, nothing else.
public protocol JWSSigner: Sendable {
    /// The algorithm every signature of this key uses.
    var algorithm: JWSAlgorithm { get }

    /// The key's RFC 7638 thumbprint: the `kid` of what it signs, and `iss`/`sub` of a device
    /// assertion.
    var keyID: String { get }

    /// Signs `message` (the ASCII bytes of `header.payload`) and returns the JWS signature bytes.
    ///
    /// - Throws: ``KeyAuthError`` when the key cannot sign (a TPM that is gone, a wrong PIN the
    ///   key only learns about now); never for the message's content.
    func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8]
}

extension RSAPrivateKey: JWSSigner {
    /// Always RS256: keyauth's RSA keys sign with PKCS#1 v1.5 and SHA-256.
    public var algorithm: JWSAlgorithm { .rs256 }

    /// The public key's fingerprint.
    public var keyID: String { publicKey.fingerprint }
}
