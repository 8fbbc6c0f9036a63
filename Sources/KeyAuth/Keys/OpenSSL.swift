internal import CKeyAuthOpenSSL
import Synchronization

/// Thin helpers over libcrypto. Everything that touches an OpenSSL pointer lives in `Keys/`.
enum OpenSSL {
    /// Drains OpenSSL's thread-local error queue into one error, so that a stale entry never
    /// shows up in an unrelated later failure.
    static func error(_ code: KeyAuthError.Code, _ message: String) -> KeyAuthError {
        var texts: [String] = []
        var firstCode: UInt = 0
        while true {
            let errorCode = ERR_get_error()
            if errorCode == 0 { break }
            if firstCode == 0 { firstCode = errorCode }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(errorCode, &buffer, buffer.count)
            texts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        let native = NativeError(library: "openssl", code: Int(firstCode), text: texts.joined(separator: "; "))
        return KeyAuthError(code, message, underlying: texts.isEmpty ? nil : native)
    }

    /// Forgets queued errors after a failure that was expected and handled.
    static func clearErrors() {
        ERR_clear_error()
    }

    /// SHA-256, fetched once: a fetch per operation costs measurable time on small inputs.
    nonisolated(unsafe) static let sha256: OpaquePointer? = EVP_MD_fetch(nil, ckeyauth_name_SHA256(), nil)

    /// SHA-512, fetched once, for the `rsa-sha2-512` signatures ssh asks an agent for.
    nonisolated(unsafe) static let sha512: OpaquePointer? = EVP_MD_fetch(nil, ckeyauth_name_SHA512(), nil)

    static func sha256Digest(_ data: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let digest = data.withUnsafeBytes { bytes in
            Result { () throws(KeyAuthError) in try sha256Digest(bytes) }
        }
        return try digest.get()
    }

    /// SHA-512 of `data`, for a TPM key's `rsa-sha2-512` signature (the TPM signs a digest).
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL cannot digest.
    static func sha512Digest(_ data: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let digest = data.withUnsafeBytes { bytes in
            Result { () throws(KeyAuthError) in try self.digest(bytes, with: sha512, size: 64, name: "SHA-512") }
        }
        return try digest.get()
    }

    /// SHA-256 of raw bytes, with the digest fetched once.
    ///
    /// - Throws: `.cryptoFailed` when OpenSSL cannot digest (no SHA-256 in the loaded providers,
    ///   or no memory): a server answers that request with 500 and lives on.
    static func sha256Digest(_ input: UnsafeRawBufferPointer) throws(KeyAuthError) -> [UInt8] {
        try digest(input, with: sha256, size: 32, name: "SHA-256")
    }

    /// The `size`-byte digest of `input` with the fetched `algorithm`, named `name` in errors.
    private static func digest(
        _ input: UnsafeRawBufferPointer, with algorithm: OpaquePointer?, size: Int, name: String
    ) throws(KeyAuthError) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: size)
        var length: UInt32 = 0
        let ok = digest.withUnsafeMutableBytes { output in
            EVP_Digest(
                input.baseAddress, input.count, output.baseAddress?.assumingMemoryBound(to: UInt8.self), &length,
                algorithm, nil)
        }
        guard ok == 1, length == size else { throw error(.cryptoFailed, "\(name) failed") }
        return digest
    }

    /// Cryptographically secure random bytes from OpenSSL's DRBG.
    static func randomBytes(count: Int) throws(KeyAuthError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBytes { buffer in
            RAND_bytes(buffer.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32(count))
        }
        guard ok == 1 else { throw error(.cryptoFailed, "the random number generator failed") }
        return bytes
    }

    /// Compares secrets in time that depends only on the length.
    static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        if lhs.isEmpty { return true }
        return lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, lhs.count) == 0 }
        }
    }

    /// Overwrites memory in a way the compiler may not remove.
    static func cleanse(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        OPENSSL_cleanse(base, buffer.count)
    }

    /// Runs `body` with a memory BIO over `bytes`, freed afterwards.
    static func withReadBIO<Result>(
        _ bytes: [UInt8], _ body: (OpaquePointer) throws(KeyAuthError) -> Result
    ) throws(KeyAuthError) -> Result {
        let bio: OpaquePointer? = bytes.withUnsafeBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        guard let bio else { throw error(.cryptoFailed, "cannot allocate a memory BIO") }
        defer { BIO_free(bio) }
        return try body(bio)
    }

    /// Runs `write` against an empty memory BIO and returns what it wrote.
    static func collectBIO(
        _ what: String, _ write: (OpaquePointer) -> Int32
    ) throws(KeyAuthError) -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { throw error(.cryptoFailed, "cannot allocate a memory BIO") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw error(.cryptoFailed, "cannot encode \(what)") }
        var data: UnsafeMutablePointer<CChar>?
        let length = ckeyauth_BIO_get_mem_data(bio, &data)
        guard let data, length > 0 else { return [] }
        return data.withMemoryRebound(to: UInt8.self, capacity: length) {
            Array(UnsafeBufferPointer(start: $0, count: length))
        }
    }
}

/// The one owner of an `EVP_PKEY`.
///
/// An `EVP_PKEY` is safe to use from several threads at once for signing and verifying as long
/// as each operation has its own context, which ``SHA256Signatures`` ensures; it is never mutated
/// after construction, hence `@unchecked Sendable`.
final class EVPKey: @unchecked Sendable {
    let pointer: OpaquePointer
    /// Verification contexts set up once (SHA-256, and PKCS#1 v1.5 padding for RSA) and reused:
    /// creating one per operation costs a fifth of an RSA-2048 verification, and a third of a
    /// P-256 signature. Each is used by one thread at a time: taken out under the lock, put
    /// back after.
    private let verifyContexts = Mutex(ContextPool())
    /// The same for signing: a server signs an access token per login.
    private let signContexts = Mutex(ContextPool())

    /// Raw context pointers; sendable because only the lock's holder touches them.
    private struct ContextPool: @unchecked Sendable {
        var contexts: [OpaquePointer] = []
    }

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        Self.free(verifyContexts)
        Self.free(signContexts)
        EVP_PKEY_free(pointer)
    }

    private static func free(_ pool: borrowing Mutex<ContextPool>) {
        pool.withLock { pool in
            for context in pool.contexts { EVP_PKEY_CTX_free(context) }
        }
    }

    /// Runs `body` with a verification context for this key.
    func withVerifyContext<Result>(_ body: (OpaquePointer) -> Result?) -> Result? {
        withContext(from: verifyContexts, initialize: EVP_PKEY_verify_init, body)
    }

    /// Runs `body` with a signing context for this key.
    func withSignContext<Result>(_ body: (OpaquePointer) -> Result?) -> Result? {
        withContext(from: signContexts, initialize: EVP_PKEY_sign_init, body)
    }

    private func withContext<Result>(
        from pool: borrowing Mutex<ContextPool>, initialize: (OpaquePointer?) -> Int32,
        _ body: (OpaquePointer) -> Result?
    ) -> Result? {
        var context = pool.withLock { $0.contexts.popLast() }
        if context == nil {
            guard let fresh = EVP_PKEY_CTX_new_from_pkey(nil, pointer, nil) else { return nil }
            guard initialize(fresh) == 1, !isRSA || EVP_PKEY_CTX_set_rsa_padding(fresh, RSA_PKCS1_PADDING) == 1,
                EVP_PKEY_CTX_set_signature_md(fresh, OpenSSL.sha256) == 1
            else {
                EVP_PKEY_CTX_free(fresh)
                OpenSSL.clearErrors()
                return nil
            }
            context = fresh
        }
        guard let context else { return nil }
        let result = body(context)
        let kept = pool.withLock { pool in
            guard pool.contexts.count < 16 else { return false }
            pool.contexts.append(context)
            return true
        }
        if !kept { EVP_PKEY_CTX_free(context) }
        return result
    }

    var bits: Int { Int(EVP_PKEY_get_bits(pointer)) }

    var isRSA: Bool { EVP_PKEY_is_a(pointer, "RSA") == 1 }

    /// A big-number parameter ("n", "e", "d") as big-endian bytes without leading zeros.
    func bigNumberParameter(_ name: String) -> [UInt8]? {
        var number: OpaquePointer? = nil
        guard EVP_PKEY_get_bn_param(pointer, name, &number) == 1, let number else {
            OpenSSL.clearErrors()
            return nil
        }
        defer { BN_clear_free(number) }
        let count = Int((BN_num_bits(number) + 7) / 8)
        var bytes = [UInt8](repeating: 0, count: count)
        _ = bytes.withUnsafeMutableBytes { BN_bn2bin(number, $0.baseAddress?.assumingMemoryBound(to: UInt8.self)) }
        return bytes
    }

    /// SubjectPublicKeyInfo DER.
    func publicKeyDER() throws(KeyAuthError) -> [UInt8] {
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_PUBKEY(pointer, &output)
        guard length > 0, let output else { throw OpenSSL.error(.cryptoFailed, "cannot encode the public key") }
        defer { ckeyauth_OPENSSL_free(output) }
        return Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }
}

/// RS256 and ES256 signing and verification over an ``EVPKey``: the message hashed with SHA-256,
/// then the digest signed or verified with one of the key's reused contexts. For ES256 the
/// signature is DER; ``ECDSASignatureEncoding`` converts it to and from a JWS's `r || s`.
enum SHA256Signatures {
    static func sign(_ key: EVPKey, _ message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try sign(key, digest: OpenSSL.sha256Digest(message))
    }

    private static func sign(_ key: EVPKey, digest: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let capacity = Int(EVP_PKEY_get_size(key.pointer))
        let signature = key.withSignContext { sign(digest, with: $0, capacity: capacity) }
        guard let signature else { throw OpenSSL.error(.cryptoFailed, "signing failed") }
        return signature
    }

    /// `EVP_PKEY_sign` of a digest with a context set up for it (padding, digest), or nil.
    static func sign(_ digest: [UInt8], with context: OpaquePointer, capacity: Int) -> [UInt8]? {
        var signature = [UInt8](repeating: 0, count: capacity)
        var length = signature.count
        let ok = signature.withUnsafeMutableBytes { output in
            digest.withUnsafeBytes { hash in
                EVP_PKEY_sign(
                    context, output.baseAddress?.assumingMemoryBound(to: UInt8.self), &length,
                    hash.baseAddress?.assumingMemoryBound(to: UInt8.self), hash.count)
            }
        }
        return ok == 1 ? Array(signature.prefix(length)) : nil
    }

    static func verify(_ key: EVPKey, signature: [UInt8], message: [UInt8]) -> Bool {
        // A digest that cannot be made verifies nothing.
        guard let digest = try? OpenSSL.sha256Digest(message) else { return false }
        return verify(key, signature: signature, digest: digest)
    }

    private static func verify(_ key: EVPKey, signature: [UInt8], digest: [UInt8]) -> Bool {
        let result = key.withVerifyContext { context in
            signature.withUnsafeBytes { sig in
                digest.withUnsafeBytes { hash in
                    EVP_PKEY_verify(
                        context, sig.baseAddress?.assumingMemoryBound(to: UInt8.self), sig.count,
                        hash.baseAddress?.assumingMemoryBound(to: UInt8.self), hash.count)
                }
            }
        }
        if result != 1 { OpenSSL.clearErrors() }
        return result == 1
    }
}
