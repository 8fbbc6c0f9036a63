import Glibc
import KeyAuth

/// What `serve` reads from files of its own besides the database: the signing key file, the SSH
/// CA's key file and the principal map.
///
/// Read before the addresses are bound and the database is opened, so that a missing, exposed
/// or corrupt file stops a start before it has created a database or changed one.
struct ServeFiles {
    /// The key from `--signing-key-file`, or nil to use (or create) the keys stored in the
    /// database.
    var signingKeys: ServerSigningKeys?
    /// The SSH user CA of `--ssh-ca-key-file`, or nil when SSH certificates are off.
    var sshAuthorities: SSHCertificateAuthorities?
    /// The rules of `--ssh-principals-file`, or nil for the default mapping.
    var sshPrincipalMap: SSHPrincipalMapFile?

    /// systemd's `$CREDENTIALS_DIRECTORY` for this service, where `LoadCredential=` puts key
    /// files as systemd makes them (``SecureFile/readSecret(_:credentialsDirectory:)``).
    static var credentialsDirectory: String? {
        getenv("CREDENTIALS_DIRECTORY").map { String(cString: $0) }
    }

    /// Reads the files `configuration` names.
    ///
    /// - Throws: `KeyAuthError` naming the file: `.keyNotFound`, `.keyUnprotected`,
    ///   `.keyCorrupt` or `.keyRejected` for an unusable key, `.invalidArgument` for a principal
    ///   map without a CA key.
    init(_ configuration: ServerConfiguration) throws(KeyAuthError) {
        if configuration.sshPrincipalsFile != nil && configuration.sshCAKeyFile == nil {
            throw KeyAuthError(.invalidArgument, ServerConfiguration.principalsWithoutCA)
        }
        signingKeys = try configuration.signingKeyFile.map { file throws(KeyAuthError) in
            try ServerSigningKeys.load(file: file)
        }
        sshAuthorities = try configuration.sshCAKeyFile.map { file throws(KeyAuthError) in
            try SSHCertificateAuthorities(keyFile: file)
        }
        sshPrincipalMap = try configuration.sshPrincipalsFile.map { file throws(KeyAuthError) in
            try SSHPrincipalMapFile(path: file)
        }
    }
}
