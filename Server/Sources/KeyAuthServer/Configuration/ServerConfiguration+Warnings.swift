/// The warnings `serve` prints at start for settings that work but are unsafe outside
/// development.
extension ServerConfiguration {
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

    /// The title of SERVER.md's section on TLS, which the warning names.
    package static let tlsSection = "Deployment behind a TLS reverse proxy"
}
