internal import CKeyAuthOpenSSL

/// What EC P-256 and Ed25519 keys need from an ``EVPKey`` beyond what RSA keys use: generation by
/// type, the raw public key, one-shot digest signing and verifying, and PEM in and out.
///
/// Every operation makes its own `EVP_MD_CTX` and frees it before returning, so a key can sign
/// and verify from several threads at once.
extension EVPKey {
    /// The OpenSSL key type of each curve keyauth uses.
    enum CurveKind {
        /// EC on P-256 (prime256v1), for ES256.
        case p256
        /// Ed25519, for EdDSA.
        case ed25519

        /// The `EVP_PKEY_is_a` name.
        var typeName: String {
            switch self {
            case .p256: "EC"
            case .ed25519: "ED25519"
            }
        }
    }

    /// Generates a new key of `kind`.
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL cannot make it.
    static func generate(_ kind: CurveKind) throws(KeyAuthError) -> EVPKey {
        let typeName = kind == .p256 ? ckeyauth_name_EC() : ckeyauth_name_ED25519()
        guard let context = EVP_PKEY_CTX_new_from_name(nil, typeName, nil) else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate a key context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw OpenSSL.error(.cryptoFailed, "key generation failed") }
        if kind == .p256, EVP_PKEY_CTX_set_group_name(context, ckeyauth_name_P256()) != 1 {
            throw OpenSSL.error(.cryptoFailed, "cannot select the P-256 curve")
        }
        var pointer: OpaquePointer? = nil
        guard EVP_PKEY_generate(context, &pointer) == 1, let pointer else {
            throw OpenSSL.error(.cryptoFailed, "\(kind.typeName) key generation failed")
        }
        return EVPKey(taking: pointer)
    }

    /// Builds a P-256 public key from its uncompressed point (`04 || x || y`, 65 bytes).
    ///
    /// OpenSSL decodes the point onto the curve, so a point that is not on P-256 is refused
    /// here, before it could verify anything.
    /// - Throws: `.keyCorrupt` for a point that is not on the curve or not 65 bytes.
    static func p256PublicKey(uncompressedPoint point: [UInt8]) throws(KeyAuthError) -> EVPKey {
        guard point.count == 65, point.first == 0x04 else {
            throw KeyAuthError(.keyCorrupt, "a P-256 public key is an uncompressed point of 65 bytes")
        }
        guard let builder = OSSL_PARAM_BLD_new() else { throw OpenSSL.error(.cryptoFailed, "cannot allocate") }
        defer { OSSL_PARAM_BLD_free(builder) }
        let pushed = point.withUnsafeBytes { bytes in
            OSSL_PARAM_BLD_push_utf8_string(builder, ckeyauth_param_group(), ckeyauth_name_P256(), 0) == 1
                && OSSL_PARAM_BLD_push_octet_string(builder, ckeyauth_param_pub(), bytes.baseAddress, bytes.count) == 1
        }
        guard pushed, let parameters = OSSL_PARAM_BLD_to_param(builder) else {
            throw OpenSSL.error(.cryptoFailed, "cannot build EC parameters")
        }
        defer { OSSL_PARAM_free(parameters) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, ckeyauth_name_EC(), nil) else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate a key context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var pointer: OpaquePointer? = nil
        guard EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &pointer, ckeyauth_EVP_PKEY_PUBLIC_KEY(), parameters) == 1, let pointer
        else { throw OpenSSL.error(.keyCorrupt, "not a point on the P-256 curve") }
        return EVPKey(taking: pointer)
    }

    /// Builds an Ed25519 public key from its 32 bytes (RFC 8032 section 5.1.5).
    ///
    /// - Throws: `.keyCorrupt` for another length.
    static func ed25519PublicKey(_ bytes: [UInt8]) throws(KeyAuthError) -> EVPKey {
        guard bytes.count == 32 else { throw KeyAuthError(.keyCorrupt, "an Ed25519 public key is 32 bytes") }
        let pointer = bytes.withUnsafeBytes { buffer in
            EVP_PKEY_new_raw_public_key_ex(
                nil, ckeyauth_name_ED25519(), nil, buffer.baseAddress?.assumingMemoryBound(to: UInt8.self),
                buffer.count)
        }
        guard let pointer else { throw OpenSSL.error(.keyCorrupt, "not an Ed25519 public key") }
        return EVPKey(taking: pointer)
    }

    /// Reads a DER SubjectPublicKeyInfo of any key type.
    ///
    /// - Throws: `.keyCorrupt` when it does not decode.
    static func readPublicKey(der: [UInt8]) throws(KeyAuthError) -> EVPKey {
        let pointer: OpaquePointer? = der.withUnsafeBytes { buffer in
            var cursor = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let pointer else { throw OpenSSL.error(.keyCorrupt, "not a DER public key (SubjectPublicKeyInfo)") }
        return EVPKey(taking: pointer)
    }

    /// Whether the key is of `kind` (and, for EC, on P-256).
    func isCurve(_ kind: CurveKind) -> Bool {
        guard EVP_PKEY_is_a(pointer, kind.typeName) == 1 else { return false }
        guard kind == .p256 else { return true }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(pointer, "group", &name, name.count, &length) == 1 else {
            OpenSSL.clearErrors()
            return false
        }
        let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    /// The public key's raw encoding: the uncompressed point for EC, the 32 bytes for Ed25519.
    func rawPublicKey() throws(KeyAuthError) -> [UInt8] {
        var length = 0
        guard EVP_PKEY_get_octet_string_param(pointer, "pub", nil, 0, &length) == 1, length > 0 else {
            throw OpenSSL.error(.cryptoFailed, "cannot read the public key")
        }
        var bytes = [UInt8](repeating: 0, count: length)
        let ok = bytes.withUnsafeMutableBytes { buffer in
            EVP_PKEY_get_octet_string_param(
                pointer, "pub", buffer.baseAddress?.assumingMemoryBound(to: UInt8.self), buffer.count, &length)
        }
        guard ok == 1 else { throw OpenSSL.error(.cryptoFailed, "cannot read the public key") }
        return Array(bytes.prefix(length))
    }

    /// Signs `message` in one shot with `digest` (nil: none, for Ed25519); for an RSA key that is
    /// PKCS#1 v1.5, OpenSSL's default padding.
    func digestSign(_ message: [UInt8], digest: OpaquePointer?) throws(KeyAuthError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw OpenSSL.error(.cryptoFailed, "cannot allocate") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, digest, nil, pointer) == 1 else {
            throw OpenSSL.error(.cryptoFailed, "cannot start signing")
        }
        var length = 0
        let sized = message.withUnsafeBytes { input in
            EVP_DigestSign(context, nil, &length, input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count)
        }
        guard sized == 1, length > 0 else { throw OpenSSL.error(.cryptoFailed, "signing failed") }
        var signature = [UInt8](repeating: 0, count: length)
        let ok = signature.withUnsafeMutableBytes { output in
            message.withUnsafeBytes { input in
                EVP_DigestSign(
                    context, output.baseAddress?.assumingMemoryBound(to: UInt8.self), &length,
                    input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count)
            }
        }
        guard ok == 1 else { throw OpenSSL.error(.cryptoFailed, "signing failed") }
        return Array(signature.prefix(length))
    }

    /// Whether `signature` verifies over `message` hashed with `digest` (nil: none, for Ed25519);
    /// for an RSA key that is PKCS#1 v1.5, the counterpart of ``digestSign(_:digest:)``.
    func digestVerify(_ signature: [UInt8], for message: [UInt8], digest: OpaquePointer?) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, digest, nil, pointer) == 1 else {
            OpenSSL.clearErrors()
            return false
        }
        let result = signature.withUnsafeBytes { sig in
            message.withUnsafeBytes { input in
                EVP_DigestVerify(
                    context, sig.baseAddress?.assumingMemoryBound(to: UInt8.self), sig.count,
                    input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count)
            }
        }
        if result != 1 { OpenSSL.clearErrors() }
        return result == 1
    }

    /// Reads an unencrypted private key PEM of any type OpenSSL knows.
    ///
    /// - Throws: `.keyEncrypted` for an encrypted PEM, `.keyCorrupt` for anything else that is
    ///   not a private key.
    static func readPrivateKey(pem: [UInt8]) throws(KeyAuthError) -> EVPKey {
        if PEMText.contains(pem, "-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            throw KeyAuthError(.keyEncrypted, "the key is encrypted")
        }
        return try OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) in
            // A callback that refuses, so OpenSSL never falls back to prompting on the terminal.
            guard let pointer = PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil) else {
                throw OpenSSL.error(.keyCorrupt, "not a PEM private key")
            }
            return EVPKey(taking: pointer)
        }
    }

    /// The private key as unencrypted PKCS#8 PEM, as `openssl genpkey` writes it.
    ///
    /// - Warning: the bytes are the private key; wipe them when done.
    func unencryptedPKCS8PEM() throws(KeyAuthError) -> [UInt8] {
        try OpenSSL.collectBIO("the private key") { bio in
            PEM_write_bio_PKCS8PrivateKey(bio, pointer, nil, nil, 0, nil, nil)
        }
    }
}

/// The two encodings of an ES256 signature: OpenSSL's DER `ECDSA-Sig-Value` and the fixed
/// 64-byte `r || s` of RFC 7518 section 3.4 that a JWS carries.
enum ECDSASignatureEncoding {
    /// The byte length of each of `r` and `s` on P-256.
    static let coordinateLength = 32

    /// `r || s` from DER, each left-padded to 32 bytes.
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL wrote something that does not decode (never for a
    ///   signature of its own).
    static func raw(fromDER der: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let signature: OpaquePointer? = der.withUnsafeBytes { buffer in
            var cursor = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw OpenSSL.error(.cryptoFailed, "cannot decode an ECDSA signature") }
        defer { ECDSA_SIG_free(signature) }
        var raw = [UInt8](repeating: 0, count: 2 * coordinateLength)
        let written = raw.withUnsafeMutableBytes { buffer -> Bool in
            guard let base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return false }
            return BN_bn2binpad(ECDSA_SIG_get0_r(signature), base, Int32(coordinateLength)) == coordinateLength
                && BN_bn2binpad(ECDSA_SIG_get0_s(signature), base + coordinateLength, Int32(coordinateLength))
                    == coordinateLength
        }
        guard written else { throw KeyAuthError(.cryptoFailed, "an ECDSA signature value is too large") }
        return raw
    }

    /// DER from `r || s`; nil when `raw` is not 64 bytes (a JWS signature of another length is
    /// simply invalid, RFC 7518 section 3.4).
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * coordinateLength, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let (r, s) = raw.withUnsafeBytes { buffer in
            let base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return (
                BN_bin2bn(base, Int32(coordinateLength), nil),
                BN_bin2bn(base.map { $0 + coordinateLength }, Int32(coordinateLength), nil)
            )
        }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBytes { buffer -> Int32 in
            var cursor = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}
