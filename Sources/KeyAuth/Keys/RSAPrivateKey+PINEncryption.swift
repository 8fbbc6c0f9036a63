internal import CKeyAuthOpenSSL

extension RSAPrivateKey {
    /// The key as PKCS#8 PEM; with a PIN, an `ENCRYPTED PRIVATE KEY` (PBES2, AES-256-CBC) that
    /// `openssl pkey -passin` reads as well.
    ///
    /// - Parameters:
    ///   - pin: Encrypts the key when given.
    ///   - encryption: The key derivation; ``PINKeyEncryption/standard`` (scrypt) unless a test
    ///     or a benchmark needs another.
    /// - Warning: without a PIN the result holds the private key in the clear; the caller
    ///   should wrap it in ``SecretBytes`` or wipe it after writing it out.
    public func pkcs8PEM(
        pin: SecretBytes? = nil, encryption: PINKeyEncryption = .standard
    ) throws(KeyAuthError) -> [UInt8] {
        guard let pin else {
            return try OpenSSL.collectBIO("the private key") { bio in
                PEM_write_bio_PKCS8PrivateKey(bio, key.pointer, nil, nil, 0, nil, nil)
            }
        }
        guard let info = EVP_PKEY2PKCS8(key.pointer) else {
            throw OpenSSL.error(.cryptoFailed, "cannot encode the key")
        }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        var salt = try OpenSSL.randomBytes(count: 16)
        let algorithm: UnsafeMutablePointer<X509_ALGOR>? = salt.withUnsafeMutableBytes { buffer in
            let saltPointer = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            switch encryption.keyDerivation {
            case .scrypt(let n, let r, let p):
                return PKCS5_pbe2_set_scrypt(EVP_aes_256_cbc(), saltPointer, Int32(buffer.count), nil, n, r, p)
            case .pbkdf2HMACSHA256(let iterations):
                return PKCS5_pbe2_set_iv(
                    EVP_aes_256_cbc(), Int32(iterations), saltPointer, Int32(buffer.count), nil, NID_hmacWithSHA256)
            }
        }
        guard let algorithm else { throw OpenSSL.error(.cryptoFailed, "cannot set up PBES2 with \(encryption)") }
        // PKCS8_set0_pbe takes the algorithm on success only.
        let encrypted: OpaquePointer? = pin.withUnsafeBytes { buffer in
            buffer.withMemoryRebound(to: CChar.self) {
                PKCS8_set0_pbe($0.baseAddress, Int32($0.count), info, algorithm)
            }
        }
        guard let encrypted else {
            X509_ALGOR_free(algorithm)
            throw OpenSSL.error(.cryptoFailed, "cannot encrypt the key")
        }
        defer { X509_SIG_free(encrypted) }
        return try OpenSSL.collectBIO("the encrypted private key") { bio in PEM_write_bio_PKCS8(bio, encrypted) }
    }

    /// How an `ENCRYPTED PRIVATE KEY` PEM is encrypted, read without the PIN.
    ///
    /// - Returns: nil for a PEM that is not encrypted PKCS#8, or that uses a scheme keyauth never
    ///   writes (another cipher's key derivation, PBKDF2 with another hash, PBES1).
    public static func pinEncryption(ofPEM pem: [UInt8]) -> PINKeyEncryption? {
        guard isEncryptedPEM(pem) else { return nil }
        let signature: OpaquePointer? = try? OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) in
            guard let sig = PEM_read_bio_PKCS8(bio, nil, nil, nil) else {
                throw KeyAuthError(.keyCorrupt, "not an encrypted PKCS#8 private key")
            }
            return sig
        }
        guard let signature else {
            OpenSSL.clearErrors()
            return nil
        }
        defer { X509_SIG_free(signature) }
        var algorithm: UnsafePointer<X509_ALGOR>? = nil
        X509_SIG_get0(signature, &algorithm, nil)
        guard let scheme = PBES2Parameters(algorithm) else {
            OpenSSL.clearErrors()
            return nil
        }
        defer { PBE2PARAM_free(scheme.pointer) }
        let derivation = scheme.keyDerivation
        if derivation == nil { OpenSSL.clearErrors() }
        return derivation.map(PINKeyEncryption.init)
    }
}

/// The PBES2 parameters of an encrypted PKCS#8 key, decoded; the caller frees ``pointer``.
private struct PBES2Parameters {
    let pointer: UnsafeMutablePointer<PBE2PARAM>

    /// Decodes the parameters when `algorithm` is PBES2 with AES-256-CBC.
    init?(_ algorithm: UnsafePointer<X509_ALGOR>?) {
        guard let parameters = Self.sequence(of: algorithm, expecting: NID_pbes2),
            let decoded = Self.decode(parameters, d2i_PBE2PARAM)
        else { return nil }
        var cipher: OpaquePointer? = nil
        X509_ALGOR_get0(&cipher, nil, nil, decoded.pointee.encryption)
        guard OBJ_obj2nid(cipher) == NID_aes_256_cbc else {
            PBE2PARAM_free(decoded)
            return nil
        }
        pointer = decoded
    }

    /// scrypt or PBKDF2-HMAC-SHA256 with their parameters; nil for anything else.
    var keyDerivation: PINKeyEncryption.KeyDerivation? {
        let function = UnsafePointer(pointer.pointee.keyfunc)
        if let parameters = Self.sequence(of: function, expecting: NID_id_scrypt) {
            guard let scrypt = Self.decode(parameters, d2i_SCRYPT_PARAMS) else { return nil }
            defer { SCRYPT_PARAMS_free(scrypt) }
            guard let n = Self.unsigned(scrypt.pointee.costParameter), let r = Self.unsigned(scrypt.pointee.blockSize),
                let p = Self.unsigned(scrypt.pointee.parallelizationParameter),
                Self.isAES256KeyLength(scrypt.pointee.keyLength)
            else { return nil }
            return .scrypt(n: n, r: r, p: p)
        }
        if let parameters = Self.sequence(of: function, expecting: NID_id_pbkdf2) {
            guard let pbkdf2 = Self.decode(parameters, d2i_PBKDF2PARAM) else { return nil }
            defer { PBKDF2PARAM_free(pbkdf2) }
            // An absent PRF means HMAC-SHA1 (RFC 8018 appendix A.2), which keyauth never wrote.
            var prf: OpaquePointer? = nil
            guard let algorithm = pbkdf2.pointee.prf else { return nil }
            X509_ALGOR_get0(&prf, nil, nil, algorithm)
            guard OBJ_obj2nid(prf) == NID_hmacWithSHA256, let rounds = Self.unsigned(pbkdf2.pointee.iter),
                rounds <= UInt64(Int32.max), Self.isAES256KeyLength(pbkdf2.pointee.keylength)
            else { return nil }
            return .pbkdf2HMACSHA256(iterations: Int(rounds))
        }
        return nil
    }

    /// The DER of an algorithm's parameters when the algorithm is `nid` with a SEQUENCE.
    private static func sequence(
        of algorithm: UnsafePointer<X509_ALGOR>?, expecting nid: Int32
    ) -> UnsafePointer<ASN1_STRING>? {
        guard let algorithm else { return nil }
        var object: OpaquePointer? = nil
        var type: Int32 = 0
        var value: UnsafeRawPointer? = nil
        X509_ALGOR_get0(&object, &type, &value, algorithm)
        guard OBJ_obj2nid(object) == nid, type == V_ASN1_SEQUENCE, let value else { return nil }
        return value.assumingMemoryBound(to: ASN1_STRING.self)
    }

    /// Runs one of OpenSSL's `d2i_` decoders over an ASN1_STRING's bytes.
    private static func decode<Decoded>(
        _ string: UnsafePointer<ASN1_STRING>,
        _ decoder: (
            UnsafeMutablePointer<UnsafeMutablePointer<Decoded>?>?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, Int
        ) -> UnsafeMutablePointer<Decoded>?
    ) -> UnsafeMutablePointer<Decoded>? {
        var bytes = ASN1_STRING_get0_data(string)
        return decoder(nil, &bytes, Int(ASN1_STRING_length(string)))
    }

    /// Whether a derivation's optional `keyLength` is absent or AES-256's 32 bytes: with any
    /// other, OpenSSL cannot decrypt, and its failure would look like a wrong PIN.
    private static func isAES256KeyLength(_ integer: UnsafeMutablePointer<ASN1_INTEGER>?) -> Bool {
        guard let integer else { return true }
        return unsigned(integer) == 32
    }

    private static func unsigned(_ integer: UnsafeMutablePointer<ASN1_INTEGER>?) -> UInt64? {
        guard let integer else { return nil }
        var value: UInt64 = 0
        return ASN1_INTEGER_get_uint64(&value, integer) == 1 ? value : nil
    }
}
