import KeyAuth

/// The key that signs OpenSSH user certificates for devices (`--ssh-ca-key-file`): the server as
/// the user certificate authority hosts name in `TrustedUserCAKeys`.
///
/// It is kept apart from the token signing keys on purpose: a host that trusts it lets in anyone
/// it certifies, so it lives in a file the operator guards (0600, refused when looser, like
/// `--signing-key-file`) and rotates only when the operator says so (`ssh-ca rotate`, see
/// ``SSHCertificateAuthorities``). Ed25519 is the default type; EC P-256 and
/// RSA are there for hosts whose policy (`CASignatureAlgorithms`) wants them.
package struct SSHCertificateAuthority: Sendable {
    /// The key types `keyauth-server ssh-ca init --alg` makes.
    package enum KeyType: String, CaseIterable, Sendable {
        case ed25519
        case ecdsa
        case rsa

        var algorithm: JWSAlgorithm {
            switch self {
            case .ed25519: .edDSA
            case .ecdsa: .es256
            case .rsa: .rs256
            }
        }
    }

    /// The RSA size of a CA made here: a CA outlives the certificates it signs by years.
    static let rsaBits = 3072

    package let key: JWSPrivateKey
    /// The CA's public key in the SSH wire format (`string` type name, then its fields): what a
    /// certificate names as its signer and what `TrustedUserCAKeys` lines carry.
    package let publicKeyBlob: [UInt8]

    package init(key: JWSPrivateKey) throws(KeyAuthError) {
        self.key = key
        self.publicKeyBlob = try Self.publicKeyBlob(of: key.publicKey)
    }

    /// Generates a CA key of `type`.
    package static func generate(_ type: KeyType) throws(KeyAuthError) -> SSHCertificateAuthority {
        try SSHCertificateAuthority(key: JWSPrivateKey.generate(for: type.algorithm, rsaBits: rsaBits))
    }

    /// Reads the CA key file: an unencrypted PKCS#8 PEM private key of Ed25519, EC P-256 or RSA
    /// (2048 to 4096 bits), 0600 and the server's own.
    ///
    /// - Throws: `KeyAuthError` naming the option and the file: `.keyNotFound`, `.keyUnprotected`
    ///   (a symlink, another user's file, group or other permission bits), `.keyCorrupt`,
    ///   `.keyRejected` (another key type, an RSA size outside 2048 to 4096 bits).
    package static func load(file path: String) throws(KeyAuthError) -> SSHCertificateAuthority {
        var pem: [UInt8]
        do {
            pem = try SecureFile.readSecret(path, credentialsDirectory: ServeFiles.credentialsDirectory)
        } catch {
            throw KeyAuthError(error.code, "--ssh-ca-key-file: \(error.message)", underlying: error.underlying)
        }
        defer { CryptoPrimitives.wipe(&pem) }
        let key: JWSPrivateKey
        do {
            key = try JWSPrivateKey(pemRepresentation: pem)
            if case .rsa(let rsa) = key { try rsa.publicKey.checkPolicy(allowedBits: 2048...4096) }
        } catch {
            throw KeyAuthError(
                error.code == .keyRejected ? .keyRejected : .keyCorrupt,
                "--ssh-ca-key-file: \(path) is not an Ed25519, EC P-256 or RSA (2048 to 4096 bits) private key",
                underlying: error)
        }
        return try SSHCertificateAuthority(key: key)
    }

    /// Writes the key to `path` (unencrypted PKCS#8 PEM, 0600, atomically), refusing to replace
    /// a file that exists: replacing a CA key locks out every certificate it signed, which is a
    /// rotation the operator does on purpose, not a side effect of running `init` twice.
    ///
    /// - Throws: `.invalidArgument` when `path` exists; `.storageFailed` when it cannot be written.
    package func write(to path: String) throws(KeyAuthError) {
        let exists = KeyAuthError(
            .invalidArgument,
            "\(path) exists; keyauth-server does not replace an SSH CA key (hosts trust it): to replace it, "
                + "use keyauth-server ssh-ca rotate")
        guard !SecureFile.exists(path) else { throw exists }
        do {
            // Linked into place, not renamed: an `init` that ran at the same moment and wrote
            // first keeps its key, whose public line it printed for hosts to trust.
            try store(at: path, replacing: false)
        } catch {
            throw error.code == .keyExists ? exists : error
        }
    }

    /// Writes the key to `path` over the key there: `ssh-ca rotate`, once it has kept the old
    /// key's public part beside it (``SSHPreviousAuthority``).
    ///
    /// - Throws: `.storageFailed` when it cannot be written; the old file is then untouched.
    func replaceKey(at path: String) throws(KeyAuthError) {
        try store(at: path)
    }

    private func store(at path: String, replacing: Bool = true) throws(KeyAuthError) {
        var pem = try key.pkcs8PEM()
        defer { CryptoPrimitives.wipe(&pem) }
        try SecureFile.write(pem, to: path, replacing: replacing)
    }

    /// The type of this CA's key, as `--alg` names it.
    package var keyType: KeyType {
        switch key {
        case .ed25519: .ed25519
        case .p256: .ecdsa
        case .rsa: .rsa
        }
    }

    /// The SSH name of the CA's key type.
    package var keyTypeName: String { Self.keyTypeName(of: key.publicKey) }

    /// The `TrustedUserCAKeys` line: `TYPE BASE64 COMMENT`.
    package func publicKeyLine(comment: String) -> String {
        "\(keyTypeName) \(SSHText.base64(publicKeyBlob)) \(comment)"
    }

    /// Signs `message` as the `signature` field of a certificate (RFC 4253 section 6.6 and its
    /// successors): `string` algorithm, then `string` the signature in that algorithm's form.
    /// RSA signs `rsa-sha2-256`, never the SHA-1 `ssh-rsa` that OpenSSH no longer accepts.
    package func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let raw = try key.signature(for: message)
        var blob = SSHWireWriter()
        switch key {
        case .ed25519:
            try blob.string("ssh-ed25519")
            try blob.string(raw)
        case .p256:
            // ES256 gives r and s as two 32-byte halves; SSH wants them as two mpints.
            guard raw.count == 64 else {
                throw KeyAuthError(.cryptoFailed, "an ECDSA P-256 signature of \(raw.count) bytes")
            }
            var pair = SSHWireWriter()
            try pair.mpint(unsigned: Array(raw[0..<32]))
            try pair.mpint(unsigned: Array(raw[32..<64]))
            try blob.string("ecdsa-sha2-nistp256")
            try blob.string(pair.bytes)
        case .rsa:
            try blob.string("rsa-sha2-256")
            try blob.string(raw)
        }
        return blob.bytes
    }

    /// The SSH name of a public key's type.
    package static func keyTypeName(of key: JWSPublicKey) -> String {
        switch key {
        case .rsa: "ssh-rsa"
        case .p256: "ecdsa-sha2-nistp256"
        case .ed25519: "ssh-ed25519"
        }
    }

    /// A public key in the SSH wire format (RFC 4253 section 6.6, RFC 5656 section 3.1,
    /// RFC 8709 section 4).
    package static func publicKeyBlob(of key: JWSPublicKey) throws(KeyAuthError) -> [UInt8] {
        var blob = SSHWireWriter()
        try blob.string(keyTypeName(of: key))
        try appendPublicKeyFields(of: key, to: &blob)
        return blob.bytes
    }

    /// The fields of a public key after its type name, as a certificate of that key repeats them.
    static func appendPublicKeyFields(of key: JWSPublicKey, to blob: inout SSHWireWriter) throws(KeyAuthError) {
        switch key {
        case .rsa(let rsa):
            try blob.mpint(unsigned: rsa.exponent)
            try blob.mpint(unsigned: rsa.modulus)
        case .p256(let p256):
            try blob.string("nistp256")
            try blob.string(p256.uncompressedPoint)
        case .ed25519(let ed25519):
            try blob.string(ed25519.rawRepresentation)
        }
    }
}

/// Text forms of SSH binary data.
package enum SSHText {
    /// Standard base64 with padding (RFC 4648 section 4), as OpenSSH's key and certificate lines
    /// carry it: the base64url text with its two alphabet differences swapped back.
    package static func base64(_ bytes: [UInt8]) -> String {
        var text = String(Base64URL.encode(bytes).map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        while text.utf8.count % 4 != 0 { text += "=" }
        return text
    }
}
