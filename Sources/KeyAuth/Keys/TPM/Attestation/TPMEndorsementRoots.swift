internal import CKeyAuthOpenSSL

/// The certificate authorities whose endorsement key certificates a server trusts: the TPM
/// manufacturers' published roots that the operator configured (`--tpm-ca`), and nothing else.
///
/// A chain is checked with OpenSSL's `X509_verify_cert` against a store that holds only these
/// roots; the intermediates a client sends are offered as untrusted certificates, so they count
/// only when they chain up to a root here, and each certificate's validity period is checked at
/// the time given. OpenSSL's default certificate directories are never consulted: a web CA has no
/// say over which chips are TPMs.
package struct TPMEndorsementRoots: Sendable, Equatable {
    /// The roots, DER.
    package let certificates: [[UInt8]]
    /// The roots in an OpenSSL store, or why they cannot be.
    private let trust: Result<TrustStore, TrustStore.Unusable>

    /// No roots: every endorsement key certificate is of an unknown root.
    package static let none = TPMEndorsementRoots(certificates: [])

    package init(certificates: [[UInt8]]) {
        self.certificates = certificates
        trust = TrustStore.make(certificates)
    }

    package static func == (lhs: TPMEndorsementRoots, rhs: TPMEndorsementRoots) -> Bool {
        lhs.certificates == rhs.certificates
    }

    /// Reads every `CERTIFICATE` block of a PEM text.
    ///
    /// - Throws: `.invalidArgument` when the text holds no certificate or a block that does not
    ///   parse.
    package init(pem: [UInt8]) throws(KeyAuthError) {
        let found = try OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) -> [[UInt8]] in
            var found: [[UInt8]] = []
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
                defer { X509_free(certificate) }
                found.append(try Self.der(of: certificate))
            }
            // The loop ends at the end of the text (a "no start line" error) or at a bad block.
            let last = ERR_peek_last_error()
            OpenSSL.clearErrors()
            let endOfText = ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE
            guard endOfText || last == 0 else {
                throw KeyAuthError(.invalidArgument, "a certificate in the PEM text does not parse")
            }
            return found
        }
        guard !found.isEmpty else { throw KeyAuthError(.invalidArgument, "no PEM certificate found") }
        self.init(certificates: found)
    }

    /// Verifies `chain` (DER, the endorsement key's certificate first, then any intermediates)
    /// up to one of the roots at `time` (seconds since 1970), and returns the first
    /// certificate's public key.
    ///
    /// - Returns: the key, and nil as the problem when the chain verifies; otherwise the key and
    ///   OpenSSL's reason (`unable to get local issuer certificate`, `certificate has expired`).
    /// - Throws: `.endorsementKey` when the first certificate does not parse, holds no RSA key,
    ///   or is not an endorsement key certificate (``checkPurpose(_:)``): whoever sends another
    ///   kind of certificate in its place is not a TPM reporting its EK, whatever the chain says.
    package func verify(
        chain: [[UInt8]], at time: Int64
    ) throws(TPMAttestationError) -> (key: RSAPublicKey, problem: String?) {
        // Clients of earlier versions sent the padding some TPMs keep after the certificate in
        // its NV index as well.
        guard let leafDER = chain.first, let leaf = Self.certificate(TPMEndorsementCertificate.withoutPadding(leafDER))
        else {
            throw TPMAttestationError(.endorsementKey, "the endorsement key certificate does not parse")
        }
        defer { X509_free(leaf) }
        guard let key = Self.rsaKey(of: leaf) else {
            throw TPMAttestationError(.endorsementKey, "the endorsement key certificate holds no RSA key")
        }
        try Self.checkPurpose(leaf)
        return (key, verifyChain(leaf, intermediates: chain.dropFirst(), at: time))
    }

    /// The RSA key that the certificate `der` certifies, without checking anything else; nil
    /// when it does not parse or holds another kind of key.
    package static func certifiedKey(_ der: [UInt8]) -> RSAPublicKey? {
        guard let certificate = certificate(der) else { return nil }
        defer { X509_free(certificate) }
        return rsaKey(of: certificate)
    }

    /// The RSA key of a parsed certificate, or nil (OpenSSL's errors cleared).
    private static func rsaKey(of certificate: OpaquePointer) -> RSAPublicKey? {
        guard let publicKey = X509_get_pubkey(certificate),
            let key = try? RSAPublicKey(owning: EVPKey(taking: publicKey))
        else {
            OpenSSL.clearErrors()
            return nil
        }
        return key
    }

    /// `tcg-kp-EKCertificate` (2.23.133.8.1), the extended key usage of an EK certificate.
    private static let endorsementCertificateUsage = "2.23.133.8.1"

    /// Refuses a certificate whose extensions say it is for something else than an RSA
    /// endorsement key, as the TCG EK Credential Profile (section 3.2) defines one.
    ///
    /// `X509_verify_cert` checks a chain, not what its last certificate is for: a manufacturer's
    /// CA (or one that an operator trusts) may also sign TLS or code-signing certificates, whose
    /// private keys live in software and could then answer the credential challenge for a
    /// software "TPM". The profile's marks, and what is checked:
    /// - Key Usage is required and, for an RSA EK (a decryption key that activation encrypts a
    ///   seed to), holds `keyEncipherment`; `keyCertSign` or `cRLSign` would make it a CA's key;
    /// - Basic Constraints, when present, say it is no CA;
    /// - Extended Key Usage, when present, holds `tcg-kp-EKCertificate`: a certificate that
    ///   names its purposes and not this one (`serverAuth`) was issued for those. Its absence is
    ///   accepted, because EK certificates in use lack it (Google Cloud's vTPM EK certificates
    ///   carry only Key Usage), while swtpm's local CA puts it in, with Key Usage
    ///   `keyEncipherment` (critical) and Basic Constraints `CA:FALSE`.
    ///
    /// - Throws: `.endorsementKey` naming the mark that is missing or wrong.
    private static func checkPurpose(_ certificate: OpaquePointer) throws(TPMAttestationError) {
        func refuse(_ reason: String) -> TPMAttestationError {
            TPMAttestationError(
                .endorsementKey, "the endorsement key certificate is not one for an endorsement key: \(reason)")
        }
        // Also parses and caches the extensions; a duplicate or undecodable one marks it invalid.
        let flags = X509_get_extension_flags(certificate)
        defer { OpenSSL.clearErrors() }
        guard flags & UInt32(EXFLAG_INVALID) == 0 else { throw refuse("its extensions do not parse") }
        guard flags & UInt32(EXFLAG_CA) == 0 else { throw refuse("it is a CA certificate") }
        guard flags & UInt32(EXFLAG_KUSAGE) != 0 else { throw refuse("it has no key usage") }
        let usage = X509_get_key_usage(certificate)
        guard usage & UInt32(KU_KEY_ENCIPHERMENT) != 0 else { throw refuse("its key usage lacks keyEncipherment") }
        guard usage & UInt32(KU_KEY_CERT_SIGN | KU_CRL_SIGN) == 0 else {
            throw refuse("its key usage signs certificates")
        }
        guard flags & UInt32(EXFLAG_XKUSAGE) != 0 else { return }
        guard let purposes = X509_get_ext_d2i(certificate, NID_ext_key_usage, nil, nil).map(OpaquePointer.init) else {
            throw refuse("its extended key usage does not parse")
        }
        defer { EXTENDED_KEY_USAGE_free(purposes) }
        let count = OPENSSL_sk_num(purposes)
        let named = (0..<max(count, 0)).contains { index in
            guard let object = OPENSSL_sk_value(purposes, index) else { return false }
            var text = [CChar](repeating: 0, count: 64)
            let length = OBJ_obj2txt(&text, Int32(text.count), OpaquePointer(object), 1)
            guard length > 0, Int(length) < text.count else { return false }
            return String(decoding: text.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                == endorsementCertificateUsage
        }
        guard named else {
            throw refuse("its extended key usage does not include tcg-kp-EKCertificate (2.23.133.8.1)")
        }
    }

    /// Runs `X509_verify_cert`; nil when the chain verifies, else the reason.
    private func verifyChain(_ leaf: OpaquePointer, intermediates: ArraySlice<[UInt8]>, at time: Int64) -> String? {
        guard !certificates.isEmpty else { return "no TPM root certificate is configured" }
        let store: TrustStore
        switch trust {
        case .success(let built): store = built
        case .failure(let unusable): return unusable.reason
        }
        guard let context = X509_STORE_CTX_new(), let untrusted = OPENSSL_sk_new_null() else { return "out of memory" }
        var owned: [OpaquePointer] = []
        defer {
            OPENSSL_sk_free(untrusted)
            owned.forEach { X509_free($0) }
            X509_STORE_CTX_free(context)
            OpenSSL.clearErrors()
        }
        for intermediate in intermediates {
            guard let certificate = Self.certificate(intermediate) else { return "an intermediate does not parse" }
            owned.append(certificate)
            guard OPENSSL_sk_push(untrusted, UnsafeRawPointer(certificate)) > 0 else { return "out of memory" }
        }
        guard X509_STORE_CTX_init(context, store.store, leaf, untrusted) == 1 else { return "out of memory" }
        X509_STORE_CTX_set_time(context, 0, time_t(clamping: time))
        guard X509_verify_cert(context) != 1 else { return nil }
        let code = X509_STORE_CTX_get_error(context)
        return X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "verification failed"
    }

    /// The roots in one OpenSSL store, its only owner, built once: a bundle of hundreds of
    /// makers' roots would otherwise be parsed again for every attestation. An `X509_STORE`
    /// takes its own lock for lookups, so verifications on several threads share it.
    private final class TrustStore: @unchecked Sendable {
        struct Unusable: Error {
            let reason: String
        }

        let store: OpaquePointer

        private init(store: OpaquePointer) {
            self.store = store
        }

        deinit {
            X509_STORE_free(store)
        }

        static func make(_ certificates: [[UInt8]]) -> Result<TrustStore, Unusable> {
            guard let store = X509_STORE_new() else { return .failure(Unusable(reason: "out of memory")) }
            let owner = TrustStore(store: store)
            defer { OpenSSL.clearErrors() }
            for root in certificates {
                guard let certificate = TPMEndorsementRoots.certificate(root) else {
                    return .failure(Unusable(reason: "a configured root does not parse"))
                }
                // The store takes a reference of its own.
                defer { X509_free(certificate) }
                guard X509_STORE_add_cert(store, certificate) == 1 else {
                    return .failure(Unusable(reason: "a configured root is unusable"))
                }
            }
            return .success(owner)
        }
    }

    private static func certificate(_ der: [UInt8]) -> OpaquePointer? {
        der.withUnsafeBytes { buffer in
            var cursor = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            let parsed = d2i_X509(nil, &cursor, buffer.count)
            // A certificate followed by more bytes is not one certificate.
            guard let parsed, let cursor, let base = buffer.baseAddress,
                UnsafeRawPointer(cursor) == base + buffer.count
            else {
                if let parsed { X509_free(parsed) }
                OpenSSL.clearErrors()
                return nil
            }
            return parsed
        }
    }

    private static func der(of certificate: OpaquePointer) throws(KeyAuthError) -> [UInt8] {
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_X509(certificate, &output)
        guard length > 0, let output else { throw OpenSSL.error(.cryptoFailed, "cannot encode a certificate") }
        defer { ckeyauth_OPENSSL_free(output) }
        return Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }
}
