import KeyAuth

/// An OpenSSH user certificate (PROTOCOL.certkeys): a device's own public key, with the
/// principals it may log in as and a validity window, signed by the server's SSH CA.
///
/// The certificate always certifies the key the device registered (its RSA key, from the
/// database): a client cannot name another key, so a stolen access token buys at most a
/// certificate for a key the thief does not hold.
package struct SSHUserCertificate: Sendable, Equatable {
    /// `SSH_CERT_TYPE_USER`.
    static let userCertificateType: UInt32 = 1

    /// The certified key.
    package var publicKey: JWSPublicKey
    /// A number the CA does not repeat, which a KRL can name.
    package var serial: UInt64
    /// Free text that `sshd` logs with each login: who and which device.
    package var keyID: String
    /// The account names the certificate may log in as.
    package var principals: [String]
    /// Seconds since 1970; the window is `validAfter ..< validBefore`.
    package var validAfter: UInt64
    package var validBefore: UInt64
    /// Extension name and value; an empty value is a flag (`permit-pty`).
    package var extensions: [String: String]

    /// Creates a certificate's fields.
    package init(
        publicKey: JWSPublicKey, serial: UInt64, keyID: String, principals: [String], validAfter: UInt64,
        validBefore: UInt64, extensions: [String: String]
    ) {
        self.publicKey = publicKey
        self.serial = serial
        self.keyID = keyID
        self.principals = principals
        self.validAfter = validAfter
        self.validBefore = validBefore
        self.extensions = extensions
    }

    /// The SSH name of the certificate's type (`ssh-rsa-cert-v01@openssh.com`).
    package var typeName: String { SSHCertificateAuthority.keyTypeName(of: publicKey) + "-cert-v01@openssh.com" }

    /// The signed certificate in the SSH wire format.
    ///
    /// - Parameter nonce: random bytes (PROTOCOL.certkeys asks for them, so that a chosen-prefix
    ///   collision against the CA's hash is out of reach of whoever asks for certificates).
    package func encoded(signedBy authority: SSHCertificateAuthority, nonce: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        var body = SSHWireWriter()
        try body.string(typeName)
        try body.string(nonce)
        try SSHCertificateAuthority.appendPublicKeyFields(of: publicKey, to: &body)
        body.uint64(serial)
        body.uint32(Self.userCertificateType)
        try body.string(keyID)
        var principalList = SSHWireWriter()
        for principal in principals { try principalList.string(principal) }
        try body.string(principalList.bytes)
        body.uint64(validAfter)
        body.uint64(validBefore)
        try body.string([])  // critical options: none
        try body.string(try encodedExtensions())
        try body.string([])  // reserved
        try body.string(authority.publicKeyBlob)
        let signature = try authority.signature(for: body.bytes)
        try body.string(signature)
        return body.bytes
    }

    /// The extensions in name order, as PROTOCOL.certkeys requires: a flag's data is empty, a
    /// value's data is the value as a `string`.
    private func encodedExtensions() throws(KeyAuthError) -> [UInt8] {
        var list = SSHWireWriter()
        for name in extensions.keys.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
            try list.string(name)
            let value = extensions[name] ?? ""
            if value.isEmpty {
                try list.string([])
            } else {
                var data = SSHWireWriter()
                try data.string(value)
                try list.string(data.bytes)
            }
        }
        return list.bytes
    }

    /// The line a `-cert.pub` file holds: `TYPE BASE64 COMMENT`.
    package func line(signedBy authority: SSHCertificateAuthority, nonce: [UInt8], comment: String) throws(KeyAuthError)
        -> String
    {
        "\(typeName) \(SSHText.base64(try encoded(signedBy: authority, nonce: nonce))) \(comment)"
    }
}
