internal import CKeyAuthOpenSSL

/// A credential for a TPM's attestation key, made without a TPM: `TPM2_MakeCredential` in
/// software, as a verifier (a server) makes it.
///
/// The verifier knows the TPM's endorsement key from its manufacturer's certificate and the
/// attestation key's name from the key itself (``TPMKeyCertification/attestationKeyName``). It
/// picks a secret and wraps it so that only the TPM holding that endorsement key, with an object
/// of that name loaded, can unwrap it (``TPMConnection/activateCredential(_:encryptedSecret:)``);
/// getting the secret back proves the attestation key lives in the certified TPM.
///
/// The construction is TPM 2.0 Part 1, sections 24 (credential protection) and 11.4.10 (KDFa):
/// a random seed encrypted to the endorsement key with RSA-OAEP (SHA-256, label `IDENTITY`),
/// from which an AES-128 key (label `STORAGE`, bound to the name) encrypts the secret in CFB
/// mode and an HMAC-SHA256 key (label `INTEGRITY`) protects the result together with the name.
package struct TPMCredential: Sendable, Hashable {
    /// The contents of the `TPM2B_ID_OBJECT`: the integrity HMAC, then the encrypted secret.
    package let credentialBlob: [UInt8]
    /// The contents of the `TPM2B_ENCRYPTED_SECRET`: the seed, encrypted to the endorsement key.
    package let encryptedSecret: [UInt8]

    /// A credential as it travels, to hand to ``TPMConnection/activateCredential(_:encryptedSecret:)``.
    package init(credentialBlob: [UInt8], encryptedSecret: [UInt8]) {
        self.credentialBlob = credentialBlob
        self.encryptedSecret = encryptedSecret
    }

    /// Wraps `secret` for the attestation key named `attestationKeyName` in the TPM whose
    /// RSA endorsement key is `endorsementKey`.
    ///
    /// - Parameters:
    ///   - secret: 1 to 32 bytes (a SHA-256 digest's size, the TPM's limit for this name algorithm).
    ///   - attestationKeyName: the attestation key's name: `0x000B` and a SHA-256 digest.
    ///   - endorsementKey: the RSA-2048 endorsement key from the TPM's certificate.
    /// - Throws: `.invalidArgument` for a secret or name of the wrong size; `.cryptoFailed`
    ///   when OpenSSL fails.
    package static func make(
        secret: [UInt8], for attestationKeyName: [UInt8], endorsementKey: RSAPublicKey
    ) throws(KeyAuthError) -> TPMCredential {
        guard (1...32).contains(secret.count) else {
            throw KeyAuthError(.invalidArgument, "a TPM credential's secret must be 1 to 32 bytes")
        }
        guard attestationKeyName.count == 34, attestationKeyName.starts(with: [0x00, 0x0B]) else {
            throw KeyAuthError(.invalidArgument, "not the name of a key with SHA-256 as its name algorithm")
        }
        var seed = try CryptoPrimitives.randomBytes(count: 32)
        defer { seed.withUnsafeMutableBytes { OpenSSL.cleanse($0) } }
        let encryptedSeed = try oaepEncrypt(seed, label: Array("IDENTITY\0".utf8), to: endorsementKey)
        var symmetricKey = try kdfa(key: seed, label: "STORAGE", contextU: attestationKeyName, bits: 128)
        defer { symmetricKey.withUnsafeMutableBytes { OpenSSL.cleanse($0) } }
        var integrityKey = try kdfa(key: seed, label: "INTEGRITY", contextU: [], bits: 256)
        defer { integrityKey.withUnsafeMutableBytes { OpenSSL.cleanse($0) } }
        // The secret travels as a marshalled TPM2B_DIGEST: a 2-byte size, then the bytes.
        let encryptedIdentity = try aes128CFBEncrypt([0, UInt8(secret.count)] + secret, key: symmetricKey)
        let integrity = try hmacSHA256(key: integrityKey, encryptedIdentity + attestationKeyName)
        return TPMCredential(
            credentialBlob: [0x00, 0x20] + integrity + encryptedIdentity, encryptedSecret: encryptedSeed)
    }

    /// KDFa with HMAC-SHA256 (SP 800-108 counter mode as TPM 2.0 Part 1, section 11.4.10.2
    /// defines it): HMAC(key, counter || label || 0 || contextU || bits) per 32-byte block.
    private static func kdfa(key: [UInt8], label: String, contextU: [UInt8], bits: Int) throws(KeyAuthError) -> [UInt8]
    {
        var output: [UInt8] = []
        var counter: UInt32 = 1
        while output.count * 8 < bits {
            let input =
                withUnsafeBytes(of: counter.bigEndian) { Array($0) } + Array(label.utf8) + [0] + contextU
                + withUnsafeBytes(of: UInt32(bits).bigEndian) { Array($0) }
            output += try hmacSHA256(key: key, input)
            counter += 1
        }
        return Array(output.prefix(bits / 8))
    }

    private static func hmacSHA256(key: [UInt8], _ data: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: 32)
        var length = 0
        let done = mac.withUnsafeMutableBufferPointer { out in
            key.withUnsafeBytes { keyBytes in
                data.withUnsafeBufferPointer { input in
                    EVP_Q_mac(
                        nil, "HMAC", nil, "SHA256", nil, keyBytes.baseAddress, keyBytes.count, input.baseAddress,
                        input.count, out.baseAddress, out.count, &length)
                }
            }
        }
        guard done != nil, length == 32 else { throw OpenSSL.error(.cryptoFailed, "HMAC-SHA256 failed") }
        return mac
    }

    private static func aes128CFBEncrypt(_ plaintext: [UInt8], key: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        guard let context = EVP_CIPHER_CTX_new() else { throw OpenSSL.error(.cryptoFailed, "no cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        let iv = [UInt8](repeating: 0, count: 16)
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var written: Int32 = 0
        var finished: Int32 = 0
        let encrypted = output.withUnsafeMutableBufferPointer { out in
            EVP_EncryptInit_ex2(context, EVP_aes_128_cfb128(), key, iv, nil) == 1
                && EVP_EncryptUpdate(context, out.baseAddress, &written, plaintext, Int32(plaintext.count)) == 1
                && EVP_EncryptFinal_ex(context, out.baseAddress.map { $0 + Int(written) }, &finished) == 1
        }
        guard encrypted else { throw OpenSSL.error(.cryptoFailed, "AES-128-CFB encryption failed") }
        return Array(output.prefix(Int(written + finished)))
    }

    private static func oaepEncrypt(
        _ plaintext: [UInt8], label: [UInt8], to publicKey: RSAPublicKey
    ) throws(KeyAuthError) -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, publicKey.key.pointer, nil) else {
            throw OpenSSL.error(.cryptoFailed, "no encryption context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_encrypt_init(context) == 1, EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_OAEP_PADDING) == 1,
            EVP_PKEY_CTX_set_rsa_oaep_md(context, OpenSSL.sha256) == 1,
            EVP_PKEY_CTX_set_rsa_mgf1_md(context, OpenSSL.sha256) == 1
        else { throw OpenSSL.error(.cryptoFailed, "cannot set up RSA-OAEP") }
        // set0 takes the label over, and OpenSSL frees it with the context: it must be its memory.
        guard let copy = CRYPTO_malloc(label.count, nil, 0) else { throw OpenSSL.error(.cryptoFailed, "out of memory") }
        label.withUnsafeBytes { bytes in
            if let base = bytes.baseAddress { copy.copyMemory(from: base, byteCount: bytes.count) }
        }
        guard EVP_PKEY_CTX_set0_rsa_oaep_label(context, copy, Int32(label.count)) == 1 else {
            ckeyauth_OPENSSL_free(copy)
            throw OpenSSL.error(.cryptoFailed, "cannot set the RSA-OAEP label")
        }
        var length = 0
        guard EVP_PKEY_encrypt(context, nil, &length, plaintext, plaintext.count) == 1 else {
            throw OpenSSL.error(.cryptoFailed, "RSA-OAEP encryption failed")
        }
        var output = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_encrypt(context, &output, &length, plaintext, plaintext.count) == 1 else {
            throw OpenSSL.error(.cryptoFailed, "RSA-OAEP encryption failed")
        }
        return Array(output.prefix(length))
    }
}
