import KeyAuth

extension ServerCommand {
    /// `ssh-ca init` and `ssh-ca show`: the CA key file and its `TrustedUserCAKeys` line.
    ///
    /// - Returns: 0; 1 when `init` finds the file exists; 65 for a file that is not a usable
    ///   key or is exposed; 66 when `show` finds no file.
    static func sshCA(_ action: SSHCAAction, keyFile: String, output: Output) -> Int32 {
        do {
            let authority: SSHCertificateAuthority
            switch action {
            case .initialize(let keyType):
                guard let type = SSHCertificateAuthority.KeyType(rawValue: keyType) else { return ExitStatus.usage }
                authority = try SSHCertificateAuthority.generate(type)
                try authority.write(to: keyFile)
                output.error("keyauth-server: wrote the SSH CA key to \(keyFile); hosts trust the line below\n")
            case .show:
                authority = try SSHCertificateAuthority.load(file: keyFile)
            }
            output.standard(authority.publicKeyLine(comment: "keyauth-ca") + "\n")
            return ExitStatus.success
        } catch {
            output.error("keyauth-server: \(error.message)\n")
            switch error.code {
            case .invalidArgument: return ExitStatus.failure
            case .keyNotFound: return 66
            case .keyCorrupt, .keyRejected, .keyUnprotected: return ExitStatus.dataError
            default: return ExitStatus.failure
            }
        }
    }
}
