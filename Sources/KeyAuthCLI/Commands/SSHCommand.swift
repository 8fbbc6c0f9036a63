import KeyAuth

/// `keyauth ssh cert` and `keyauth ssh config`: OpenSSH certificates for the device key, so that
/// hosts trusting the server's SSH CA let the user in without anyone copying a public key.
struct SSHCommand {
    let context: CommandContext
    let options: SSHOptions

    /// The certificate's file beside the key, named as ssh looks for it: `IDENTITY-cert.pub` for
    /// `IdentityFile IDENTITY`. (ssh pairs a `CertificateFile` elsewhere with its key only when it
    /// can read the key's public half without the PIN, which a PEM key file does not allow.)
    static func certificatePath(in directory: String) -> String { directory + "/device-key.pem-cert.pub" }

    func run() async throws(KeyAuthError) {
        switch options.action {
        case .certificate(let write):
            try await certificate(writingTo: write)
        case .config:
            try config()
        }
    }

    private func certificate(writingTo path: String?) async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let destination = path ?? Self.certificatePath(in: session.keys.directory)
        let grant = try await Self.fetchCertificate(session, writingTo: destination)
        context.io.printOutput(grant.line)
        context.io.printError(
            "SSH certificate for \(grant.principals.map(Formatting.printable).joined(separator: ", ")) saved to "
                + "\(destination); valid until \(RFC3339.string(fromSeconds: grant.validBefore)) (serial \(grant.serial))."
        )
    }

    /// Logs in with the session's key (through `keyauth agent` when it holds the key), asks the
    /// server for a certificate, and writes its line to `destination` atomically, mode 0600: what
    /// `keyauth ssh cert` does, and what the agent does by itself when its certificate runs out.
    ///
    /// - Throws: the login's errors; the server's (an `OAuthError` with status 404 when it is no
    ///   SSH CA); `.storageFailed` when the file cannot be written (the old one is then untouched).
    static func fetchCertificate(
        _ session: AccountSession, writingTo destination: String
    ) async throws(KeyAuthError) -> SSHCertificateGrant {
        let client = session.client
        let grant = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.requestSSHCertificate(accessToken: token, proofs: proofs)
        }
        // A certificate of another key would replace a good one with one ssh cannot use.
        guard SSHAgentProtocol.certificateBlob(line: grant.line, of: try session.keys.loadPublicKey()) != nil else {
            throw KeyAuthError(
                .serverRejected, "the SSH certificate from \(client.serverURL) is not one of this device's key")
        }
        try SecureFile.write(Array((grant.line + "\n").utf8), to: destination)
        return grant
    }

    private func config() throws(KeyAuthError) {
        let accounts = try context.accountStore()
        let name = try AccountSession.resolve(accounts, options.account)
        let account = try accounts.load(name)
        let keys = try accounts.keyPairStore(for: name)
        // ssh expands ${XDG_RUNTIME_DIR} itself in IdentityAgent: used when the variable is unset here.
        let socket =
            (try? KeyAgentSocket.path(environment: context.io.environment)).map(KeyAgentSocket.sshAgentPath(besides:))
            ?? "${XDG_RUNTIME_DIR}/keyauth/ssh-agent.sock"
        guard account.keyStore == .file else {
            // ssh cannot read a TPM key; `keyauth agent` signs with it in the TPM on its ssh-agent
            // socket, with SHA-256 or SHA-512 as ssh asks. A TPM without SHA-512 (or one that does
            // not answer now) fails ssh's default, so ssh is then told to ask for SHA-256.
            let tpm = try context.tpmConnection()
            let limit =
                (try? tpm.signsSHA512()) == true
                ? ""
                : """

                    # (the TPM at \(tpm.tcti) makes no SHA-512 signatures, or did not answer)
                    PubkeyAcceptedAlgorithms rsa-sha2-256-cert-v01@openssh.com,rsa-sha2-256
                """
            context.io.printOutput(
                """
                # keyauth: log in with the TPM key of \(name) through `keyauth agent` and its certificate
                # (start the agent with `keyauth agent`; renew the certificate with `keyauth ssh cert`)
                Host *
                    IdentityAgent \(socket)\(limit)
                """)
            return
        }
        context.io.printOutput(
            """
            # keyauth: log in with the device key of \(name) and its certificate
            # (renew it with `keyauth ssh cert`; ssh asks for the key's PIN as its passphrase,
            # or `keyauth agent` holds it: then `IdentityAgent \(socket)` lets ssh use it)
            # (the certificate is read from \(Self.certificatePath(in: keys.directory)))
            Host *
                IdentityFile \(keys.privateKeyPath)
            """)
    }
}
