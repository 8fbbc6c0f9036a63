internal import CKeyAuthOpenSSL

/// A TPM key loaded into the TPM through an open provider: the one owner of its `EVP_PKEY`.
///
/// Freeing the `EVP_PKEY` flushes the key's transient object from the TPM, which needs the
/// provider's connection; `deinit` frees the key before the provider property is released, so
/// the order is right by construction.
package final class TPMLoadedKey {
    private let pointer: OpaquePointer
    private let provider: TPMProvider
    /// The public key the blob declares; every signature is checked against it.
    let publicKey: RSAPublicKey?

    /// Generates a key in the TPM.
    init(generatingIn provider: TPMProvider, bits: Int, pin: SecretBytes?) throws(KeyAuthError) {
        guard let context = EVP_PKEY_CTX_new_from_name(provider.context, ckeyauth_name_RSA(), nil) else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate a key context for the TPM")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(bits)) == 1 else {
            throw TPMFailure.drain().error(doing: "create a key", on: provider.connection)
        }
        if let pin {
            // The provider copies the value into its generation context and wipes it there.
            let accepted = pin.withUnsafeBytes { bytes in
                var parameters = [
                    OSSL_PARAM_construct_utf8_string(
                        ckeyauth_param_user_auth(),
                        UnsafeMutableRawPointer(mutating: bytes.baseAddress)?.assumingMemoryBound(to: CChar.self),
                        bytes.count),
                    OSSL_PARAM_construct_end(),
                ]
                return EVP_PKEY_CTX_set_params(context, &parameters) == 1
            }
            guard accepted else { throw TPMFailure.drain().error(doing: "take the PIN", on: provider.connection) }
        }
        var pointer: OpaquePointer? = nil
        guard EVP_PKEY_generate(context, &pointer) == 1, let pointer else {
            throw TPMFailure.drain().error(doing: "create a \(bits)-bit RSA key", on: provider.connection)
        }
        self.pointer = pointer
        self.provider = provider
        self.publicKey = nil
    }

    /// Loads a blob into the TPM, handing it the PIN as the key's authorization value.
    init(decoding pem: [UInt8], pin: SecretBytes?, publicKey: RSAPublicKey, in provider: TPMProvider)
        throws(KeyAuthError)
    {
        var pointer: OpaquePointer? = nil
        // The context keeps the input type's pointer until the decode, and a Swift "PEM" bridged
        // to C lives only for this call: a decode that found it overwritten failed with
        // "No supported data to decode. Input type: " and nothing after it.
        guard
            let decoder = OSSL_DECODER_CTX_new_for_pkey(
                &pointer, ckeyauth_name_PEM(), nil, ckeyauth_name_RSA(), ckeyauth_EVP_PKEY_KEYPAIR(),
                provider.context, nil)
        else { throw OpenSSL.error(.cryptoFailed, "cannot allocate a decoder for the TPM key") }
        defer { OSSL_DECODER_CTX_free(decoder) }
        if let pin {
            // Copied by the decoder, which wipes its copy when it is freed.
            let accepted = pin.withUnsafeBytes { bytes in
                OSSL_DECODER_CTX_set_passphrase(
                    decoder, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count) == 1
            }
            guard accepted else { throw OpenSSL.error(.cryptoFailed, "cannot hand the PIN to the decoder") }
        }
        let decoded = pem.withUnsafeBytes { buffer in
            var data = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            var length = buffer.count
            return OSSL_DECODER_from_data(decoder, &data, &length) == 1
        }
        guard decoded, let pointer else {
            throw TPMFailure.drain().error(doing: "load the key", on: provider.connection)
        }
        self.pointer = pointer
        self.provider = provider
        self.publicKey = publicKey
    }

    deinit {
        EVP_PKEY_free(pointer)
    }

    /// The `TSS2 PRIVATE KEY` PEM, written by the provider's encoder.
    func pemRepresentation() throws(KeyAuthError) -> [UInt8] {
        let pem = try OpenSSL.collectBIO("the TPM key") { bio in
            PEM_write_bio_PrivateKey_ex(bio, pointer, nil, nil, 0, nil, nil, provider.context, nil)
        }
        guard !pem.isEmpty else { throw OpenSSL.error(.cryptoFailed, "the TPM key encodes to nothing") }
        return pem
    }

    /// Signs the SHA-256 digest of `message` in the TPM (RS256), once.
    package func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try signature(for: message, digest: .sha256)
    }

    /// Signs the SHA-256 or SHA-512 digest of `message` in the TPM with RSASSA-PKCS1-v1_5, once.
    ///
    /// keyauth's keys (made by the tpm2 provider) have the null scheme in their public area, so
    /// the TPM takes the scheme and hash from each `TPM2_Sign`. A TPM that implements no SHA-512,
    /// or a key whose public area fixed RSASSA-SHA256, refuses SHA-512 here with the TPM's error.
    package func signature(for message: [UInt8], digest kind: SSHAgentProtocol.Digest) throws(KeyAuthError)
        -> [UInt8]
    {
        let digest = try kind == .sha256 ? OpenSSL.sha256Digest(message) : OpenSSL.sha512Digest(message)
        let digestName = kind == .sha256 ? ckeyauth_name_SHA256() : ckeyauth_name_SHA512()
        guard let context = EVP_PKEY_CTX_new_from_pkey(provider.context, pointer, nil) else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate a signing context for the TPM key")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var parameters = [
            OSSL_PARAM_construct_utf8_string(
                ckeyauth_param_pad_mode(), UnsafeMutablePointer(mutating: ckeyauth_pad_mode_pkcs1()), 0),
            OSSL_PARAM_construct_utf8_string(ckeyauth_param_digest(), UnsafeMutablePointer(mutating: digestName), 0),
            OSSL_PARAM_construct_end(),
        ]
        guard EVP_PKEY_sign_init_ex(context, &parameters) == 1 else {
            throw TPMFailure.drain().error(doing: "start signing", on: provider.connection)
        }
        guard let signature = SHA256Signatures.sign(digest, with: context, capacity: Int(EVP_PKEY_get_size(pointer)))
        else { throw TPMFailure.drain().error(doing: "sign", on: provider.connection) }
        if let publicKey, !publicKey.isValidSSHSignature(signature, for: message, digest: kind) {
            throw KeyAuthError(.cryptoFailed, "the TPM's signature does not verify with the key's public key")
        }
        return signature
    }
}

@available(*, unavailable)
extension TPMLoadedKey: Sendable {}
