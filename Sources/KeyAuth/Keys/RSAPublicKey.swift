internal import CKeyAuthOpenSSL

/// An RSA public key: what a server registers and what verifies RS256 signatures.
///
/// Built only from key material that a caller chose to trust (a registry, a published vector):
/// the JWT verifier never builds one from a token's own headers.
public struct RSAPublicKey: Sendable, Hashable, CustomStringConvertible {
    let key: EVPKey
    /// SubjectPublicKeyInfo DER.
    public let derRepresentation: [UInt8]
    /// The modulus, big-endian, no leading zeros.
    public let modulus: [UInt8]
    /// The public exponent, big-endian, no leading zeros.
    public let exponent: [UInt8]
    /// The RFC 7638 SHA-256 thumbprint, base64url: the key's `kid` everywhere in keyauth.
    /// Computed once when the key is built, where a failure can be thrown.
    public let fingerprint: String

    init(owning key: EVPKey) throws(KeyAuthError) {
        guard key.isRSA else { throw KeyAuthError(.keyRejected, "the key is not an RSA key") }
        guard let modulus = key.bigNumberParameter("n"), let exponent = key.bigNumberParameter("e") else {
            throw KeyAuthError(.keyCorrupt, "the RSA key has no modulus or exponent")
        }
        self.key = key
        self.modulus = modulus
        self.exponent = exponent
        self.derRepresentation = try key.publicKeyDER()
        self.fingerprint = try JWK(
            keyType: "RSA", modulus: Base64URL.encode(modulus), exponent: Base64URL.encode(exponent)
        ).thumbprint()
    }

    /// Reads a `-----BEGIN PUBLIC KEY-----` (SPKI) PEM, given as bytes like a private key's PEM.
    ///
    /// - Throws: `.keyRejected` for any private key PEM (never parsed, so never kept in memory
    ///   longer than the caller's bytes), `.keyCorrupt` for anything else that is not an SPKI key.
    public init(pemRepresentation pem: [UInt8]) throws(KeyAuthError) {
        guard !PEMText.contains(pem, "PRIVATE KEY") else {
            throw KeyAuthError(.keyRejected, "a private key was given where a public key is expected")
        }
        let key = try OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) in
            guard let pointer = PEM_read_bio_PUBKEY(bio, nil, nil, nil) else {
                throw OpenSSL.error(.keyCorrupt, "not a PEM public key (SubjectPublicKeyInfo)")
            }
            return EVPKey(taking: pointer)
        }
        try self.init(owning: key)
    }

    /// Reads a DER SubjectPublicKeyInfo.
    public init(derRepresentation der: [UInt8]) throws(KeyAuthError) {
        try self.init(owning: EVPKey.readPublicKey(der: der))
    }

    /// Builds a key from its modulus and exponent (big-endian bytes), as a JWK carries them.
    public init(modulus: [UInt8], exponent: [UInt8]) throws(KeyAuthError) {
        guard !modulus.isEmpty, !exponent.isEmpty else { throw KeyAuthError(.keyCorrupt, "empty RSA parameter") }
        guard let builder = OSSL_PARAM_BLD_new() else { throw OpenSSL.error(.cryptoFailed, "cannot allocate") }
        defer { OSSL_PARAM_BLD_free(builder) }
        let n = modulus.withUnsafeBytes {
            BN_bin2bn($0.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32($0.count), nil)
        }
        let e = exponent.withUnsafeBytes {
            BN_bin2bn($0.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32($0.count), nil)
        }
        defer {
            BN_free(n)
            BN_free(e)
        }
        guard OSSL_PARAM_BLD_push_BN(builder, ckeyauth_param_n(), n) == 1,
            OSSL_PARAM_BLD_push_BN(builder, ckeyauth_param_e(), e) == 1
        else { throw OpenSSL.error(.cryptoFailed, "cannot build RSA parameters") }
        guard let parameters = OSSL_PARAM_BLD_to_param(builder) else {
            throw OpenSSL.error(.cryptoFailed, "cannot build RSA parameters")
        }
        defer { OSSL_PARAM_free(parameters) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, ckeyauth_name_RSA(), nil) else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate a key context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var pointer: OpaquePointer? = nil
        guard EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &pointer, ckeyauth_EVP_PKEY_PUBLIC_KEY(), parameters) == 1, let pointer
        else { throw OpenSSL.error(.keyCorrupt, "not a valid RSA public key") }
        try self.init(owning: EVPKey(taking: pointer))
    }

    /// Builds a key from a JWK's `n` and `e` (strict base64url).
    public init(jwk: JWK) throws(KeyAuthError) {
        guard jwk.keyType == "RSA", let modulus = jwk.modulus, let exponent = jwk.exponent,
            let n = Base64URL.decode(modulus), let e = Base64URL.decode(exponent)
        else { throw KeyAuthError(.keyCorrupt, "not an RSA JWK") }
        try self.init(modulus: n, exponent: e)
    }

    /// `-----BEGIN PUBLIC KEY-----` PEM (SPKI), the form keys travel in (PROTOCOL.md section 1).
    public var pemRepresentation: String {
        var lines = ["-----BEGIN PUBLIC KEY-----"]
        let base64 = Array(base64Standard(derRepresentation))
        var start = 0
        while start < base64.count {
            let end = min(start + 64, base64.count)
            lines.append(String(base64[start..<end]))
            start = end
        }
        lines.append("-----END PUBLIC KEY-----")
        return lines.joined(separator: "\n") + "\n"
    }

    /// Key size in bits.
    public var bits: Int { key.bits }

    /// The public key as a JWK (`kty`, `n`, `e`).
    public var jwk: JWK {
        JWK(keyType: "RSA", modulus: Base64URL.encode(modulus), exponent: Base64URL.encode(exponent))
    }

    /// Whether the key meets the device-key policy: RSA of `allowedBits`, exponent 65537, and
    /// no ``hasROCAFingerprint`` (a key whose private half anyone can compute).
    ///
    /// - Throws: `.keyRejected` naming the failed rule.
    public func checkPolicy(allowedBits: ClosedRange<Int> = 2048...8192) throws(KeyAuthError) {
        guard allowedBits.contains(bits) else {
            throw KeyAuthError(
                .keyRejected,
                "RSA keys must have \(allowedBits.lowerBound) to \(allowedBits.upperBound) bits, not \(bits)")
        }
        guard exponent == [0x01, 0x00, 0x01] else {
            throw KeyAuthError(.keyRejected, "RSA keys must use the public exponent 65537")
        }
        guard !hasROCAFingerprint else {
            throw KeyAuthError(
                .keyRejected,
                "the RSA key's modulus has the ROCA fingerprint (CVE-2017-15361), so its private key can be "
                    + "computed from it: make a new key (a TPM or smart card that made it needs a firmware update)")
        }
    }

    /// Whether `signature` is a valid RSASSA-PKCS1-v1_5 SHA-256 signature of `message`.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        SHA256Signatures.verify(key, signature: signature, message: message)
    }

    /// Whether `signature` is a valid RSASSA-PKCS1-v1_5 signature of `message` over `digest`:
    /// what ssh checks for `rsa-sha2-256` and `rsa-sha2-512`, and a TPM's SHA-512 signature is
    /// checked against before the agent hands it out.
    package func isValidSSHSignature(
        _ signature: [UInt8], for message: [UInt8], digest: SSHAgentProtocol.Digest
    ) -> Bool {
        switch digest {
        case .sha256: isValidSignature(signature, for: message)
        case .sha512: key.digestVerify(signature, for: message, digest: OpenSSL.sha512)
        }
    }

    public static func == (lhs: RSAPublicKey, rhs: RSAPublicKey) -> Bool {
        lhs.derRepresentation == rhs.derRepresentation
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(derRepresentation)
    }

    public var description: String { "RSAPublicKey(\(bits) bits, \(fingerprint))" }
}

/// Standard base64 with padding, for PEM bodies.
func base64Standard(_ bytes: [UInt8]) -> String {
    var text = Base64URL.encode(bytes)
    text = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
    while text.utf8.count % 4 != 0 { text += "=" }
    return text
}
