import KeyAuth

extension ServerCommand {
    /// `ssh-ca init` and `ssh-ca show`: the CA key file and its `TrustedUserCAKeys` line.
    ///
    /// - Returns: 0; 1 when `init` finds the file exists; 65 for a file that is not a usable
    ///   key or is exposed; 66 when `show` finds no file.
    static func sshCA(_ action: SSHCAAction, keyFile: String, output: Output) -> Int32 {
        if case .revocationList(let file, let database) = action {
            return writeRevocationList(to: file, keyFile: keyFile, database: database, output: output)
        }
        do {
            let authority: SSHCertificateAuthority
            switch action {
            case .initialize(let keyType):
                guard let type = SSHCertificateAuthority.KeyType(rawValue: keyType) else { return ExitStatus.usage }
                authority = try SSHCertificateAuthority.generate(type)
                try authority.write(to: keyFile)
                output.error("keyauth-server: wrote the SSH CA key to \(keyFile); hosts trust the line below\n")
            case .show, .revocationList:
                authority = try SSHCertificateAuthority.load(file: keyFile)
            }
            output.standard(authority.publicKeyLine(comment: "keyauth-ca") + "\n")
            return ExitStatus.success
        } catch {
            return keyFileFailure(error, output: output)
        }
    }

    /// `ssh-ca krl FILE`: the KRL of every revoked device's certificates, written atomically.
    private static func writeRevocationList(to file: String, keyFile: String, database: String, output: Output)
        -> Int32
    {
        let authority: SSHCertificateAuthority
        do {
            authority = try SSHCertificateAuthority.load(file: keyFile)
        } catch {
            return keyFileFailure(error, output: output)
        }
        return withStorage(database, output: output) { storage in
            let issuer = SSHCertificateIssuer(
                authority: authority, settings: SSHCertificateIssuer.Settings(), audit: AuditTrail(storage: storage),
                now: ServerClock.now,
                revocationLists: SSHRevocationListCache(signal: RevocationSignal(), now: ServerClock.now))
            let devices = try DeviceRegistry.administering(storage).allDevices()
            try SecureFile.write(try issuer.revocationList(of: devices), to: file)
            let revoked = devices.filter { $0.status == .revoked }.count
            output.error("keyauth-server: wrote \(file), revoking the certificates of \(revoked) revoked device(s)\n")
        }
    }

    /// The exit status for a CA key file that cannot be used, after saying why.
    private static func keyFileFailure(_ error: KeyAuthError, output: Output) -> Int32 {
        output.error("keyauth-server: \(error.message)\n")
        switch error.code {
        case .keyNotFound: return 66
        case .keyCorrupt, .keyRejected, .keyUnprotected: return ExitStatus.dataError
        default: return ExitStatus.failure
        }
    }
}
