import KeyAuth

extension ServerSigningKeys {
    /// Where SERVER.md says how to make a key file, for messages.
    private static let keyFileSection = "docs/SERVER.md, \"Securing the server's files\""

    /// The key sizes a signing key file may have: what the server would generate itself.
    static let fileKeyBits = 2048...4096

    /// Reads the one signing key from `--signing-key-file`: an unencrypted PEM private key
    /// (PKCS#8 as `openssl genpkey` writes it) of RSA, EC P-256 or Ed25519, checked like a
    /// client's key file; its type decides the tokens' algorithm (RS256, ES256 or EdDSA).
    ///
    /// Operators keep the key out of the database when the database is shared, backed up or
    /// replicated more widely than a key should be, or when the key comes from systemd
    /// credentials or a secrets manager. The file's key is then the only one: it signs, it alone
    /// is published in the JWKS and accepts access tokens, and keys stored in the database are
    /// ignored, because keeping the key elsewhere may be the answer to a leaked database. Such a
    /// key does not rotate: the operator replaces the file.
    ///
    /// - Throws: `KeyAuthError` naming the file: `.keyNotFound` when it is missing,
    ///   `.keyUnprotected` when it is a symlink, another user's, or has group or other permission
    ///   bits, `.storageFailed` when it cannot be opened or read, `.keyCorrupt` when it is empty
    ///   or not an unencrypted private key, `.keyRejected` for another
    ///   type or curve, an RSA size outside 2048 to 4096 bits or an exponent other than 65537.
    static func load(file path: String) throws(KeyAuthError) -> ServerSigningKeys {
        var pem: [UInt8]
        do {
            pem = try SecureFile.readSecret(path, credentialsDirectory: ServeFiles.credentialsDirectory)
        } catch {
            // A file the server's user may not open (another user's, in a directory it cannot
            // enter): the fix is the same whoever's it is.
            let fix =
                switch error.code {
                case .storageFailed:
                    "; it must be a file of the user who runs keyauth-server, mode 600, in a directory of theirs, mode 700"
                case .keyNotFound: " (openssl genpkey makes one: \(Self.keyFileSection))"
                default: ""
                }
            throw KeyAuthError(
                error.code, "--signing-key-file: \(error.message)\(fix)", underlying: error.underlying)
        }
        defer { CryptoPrimitives.wipe(&pem) }
        guard !pem.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") })
        else {
            throw KeyAuthError(
                .keyCorrupt,
                "--signing-key-file: \(path) is empty; put an unencrypted PEM private key in it (openssl genpkey: "
                    + "\(Self.keyFileSection))")
        }
        let key: JWSPrivateKey
        do {
            key = try JWSPrivateKey(pemRepresentation: pem)
        } catch {
            let problem =
                switch error.code {
                case .keyEncrypted: "is encrypted; the server needs it unencrypted (protect the file instead)"
                case .keyRejected: "is not an RSA, EC P-256 or Ed25519 key"
                default: "is not a PEM private key (openssl genpkey makes one: \(Self.keyFileSection))"
                }
            throw KeyAuthError(
                error.code == .keyRejected ? .keyRejected : .keyCorrupt, "--signing-key-file: \(path) \(problem)",
                underlying: error)
        }
        if case .rsa(let rsa) = key {
            do {
                try rsa.publicKey.checkPolicy(allowedBits: fileKeyBits)
            } catch {
                throw KeyAuthError(.keyRejected, "--signing-key-file: \(path): \(error.message)")
            }
        }
        return try ServerSigningKeys(fixed: key)
    }
}
