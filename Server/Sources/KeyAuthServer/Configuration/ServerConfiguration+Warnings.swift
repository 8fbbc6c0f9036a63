/// The warnings `serve` prints at start for settings that work but are unsafe outside
/// development.
extension ServerConfiguration {
    /// What `serve` says at start and `check-config` in its report about this configuration, in
    /// that order: one list, so that the two cannot drift apart.
    package func startWarnings(credentialsDirectory: String?) -> [String] {
        [
            openEnrollmentWarning, insecureIssuerWarning,
            sshCACredentialWarning(credentialsDirectory: credentialsDirectory),
        ].compactMap { $0 }
    }

    /// The warning for a plain `http` issuer that other machines can use: tokens cross the
    /// network in clear, and browser cookies lose `Secure` and the `__Host-` prefix (PROTOCOL.md
    /// section 9). Nil for an `https` issuer, and for `http` to a loopback host on a loopback
    /// listener (development, or a TLS proxy in front that is not the issuer).
    package var insecureIssuerWarning: String? {
        let issuer = resolvedIssuer(boundPort: listen.port)
        guard issuer.lowercased().hasPrefix("http://") else { return nil }
        guard !(Self.isLoopbackURL(issuer) && Self.isLoopback(listen.host)) else { return nil }
        return "warning: the issuer \(issuer) is plain http where other machines may reach it: access tokens "
            + "and browser cookies cross the network in clear; serve behind TLS with an https:// --issuer "
            + "(docs/SERVER.md, \"\(Self.tlsSection)\")"
    }

    /// The warning for an SSH CA key handed over by systemd's `LoadCredential=`: the copy is
    /// made once at the service's start, and `ssh-ca rotate` and `ssh-ca retire` keep what they
    /// change beside the original (`FILE.previous`, `FILE.retired`), where this server does not
    /// look; a retired CA would be missing from the revocation list, and hosts that still trust
    /// it would take its certificates. Nil without a CA key, a credentials directory, or when the
    /// key is elsewhere.
    package func sshCACredentialWarning(credentialsDirectory: String?) -> String? {
        guard let file = sshCAKeyFile, let directory = credentialsDirectory, !directory.isEmpty else { return nil }
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        guard file.hasPrefix(prefix) else { return nil }
        return "warning: --ssh-ca-key-file is a systemd credential (\(file)): ssh-ca rotate and retire change "
            + "the original file and write beside it, which this server never sees, so a retired CA stays "
            + "out of the revocation list; pass the key file's own path instead (docs/SERVER.md)"
    }

    /// The title of SERVER.md's section on TLS, which the warning names.
    package static let tlsSection = "Deployment behind a TLS reverse proxy"
}
