import KeyAuth
import KeyAuthArguments

extension ServerCommand {
    /// `ssh-ca init`, `show`, `rotate` and `retire`: the CA key file, the previous CA beside it,
    /// and the `TrustedUserCAKeys` lines.
    ///
    /// - Returns: 0; 1 when `init` finds the file exists or `rotate` finds an earlier rotation's
    ///   CA still published; 65 for a file that is not a usable key or is exposed; 66 when the
    ///   key file is missing.
    static func sshCA(_ action: SSHCAAction, keyFile: String, output: Output) -> Int32 {
        do {
            switch action {
            case .revocationList(let file, let database, let principalsFile):
                return writeRevocationList(
                    to: file, keyFile: keyFile, principalsFile: principalsFile, database: database, output: output)
            case .initialize(let keyType):
                guard let type = SSHCertificateAuthority.KeyType(rawValue: keyType) else { return ExitStatus.usage }
                let authority = try SSHCertificateAuthority.generate(type)
                try authority.write(to: keyFile)
                output.error("keyauth-server: wrote the SSH CA key to \(keyFile); hosts trust the line below\n")
                output.standard(authority.publicKeyLine(comment: "keyauth-ca") + "\n")
            case .show:
                output.standard(try SSHCertificateAuthorities(keyFile: keyFile).current.lines(at: ServerClock.now()))
            case .rotate(let keyType, let overlap, let lifetime, let cleanupInterval):
                let now = ServerClock.now()
                let rotated = try SSHCertificateAuthorities.rotate(
                    keyFile: keyFile, to: keyType.flatMap(SSHCertificateAuthority.KeyType.init(rawValue:)),
                    overlap: overlap, now: now)
                let keys = SSHCertificateAuthorities.Keys(signing: rotated.signing, previous: rotated.previous)
                output.error(
                    rotationReport(
                        keys, keyFile: keyFile, overlap: overlap, lifetime: lifetime, cleanupInterval: cleanupInterval,
                        now: now))
                output.standard(keys.lines(at: now))
            case .retire:
                let retired: SSHPreviousAuthority
                switch try SSHCertificateAuthorities.retire(keyFile: keyFile, now: ServerClock.now()) {
                case .nothingToRetire:
                    output.error("keyauth-server: no previous SSH CA to retire\n")
                    return ExitStatus.success
                case .removedLeftover:
                    output.error(
                        "keyauth-server: removed \(SSHPreviousAuthority.path(besides: keyFile)), which a rotation that "
                            + "stopped before replacing the key left naming the CA that still signs; nothing was retired\n"
                    )
                    return ExitStatus.success
                case .retired(let previous):
                    retired = previous
                }
                output.error(
                    "keyauth-server: retired the previous SSH CA (replaced at "
                        + "\(RFC3339.string(fromSeconds: retired.rotatedAt))); running servers stop publishing it and "
                        + "revoke it in the revocation list at their next cleanup, so hosts refuse its certificates "
                        + "once they fetch either: " + retired.publicKeyLine(comment: "keyauth-ca-previous") + "\n")
            }
            return ExitStatus.success
        } catch {
            return keyFileFailure(error, output: output)
        }
    }

    /// What `ssh-ca rotate` says on standard error: where the keys are, whether hosts are told
    /// of the old CA (one line or two follow), and a warning when the overlap may end before the
    /// old CA's last certificates expire: servers sign with it until their next cleanup, and
    /// what they sign then lasts `lifetime`.
    private static func rotationReport(
        _ keys: SSHCertificateAuthorities.Keys, keyFile: String, overlap: Int64, lifetime: Int64,
        cleanupInterval: Int64, now: Int64
    ) -> String {
        let previousPath = SSHPreviousAuthority.path(besides: keyFile)
        let servers =
            "Running servers sign with the new key from their next cleanup (within --cleanup-interval); "
        var report = "keyauth-server: the new SSH CA key is in \(keyFile); "
        if keys.published(at: now).count > 1, let previous = keys.previous {
            report +=
                "the previous CA stays published (in \(previousPath)) until "
                + "\(RFC3339.string(fromSeconds: previous.publishedUntil)) or ssh-ca retire. \(servers)hosts "
                + "that fetch the CA lines trust both lines below\n"
        } else {
            report +=
                "the previous CA (kept in \(previousPath)) is not published. \(servers)hosts that fetch the CA "
                + "lines trust only the line below\n"
        }
        if overlap < lifetime.addingSaturating(cleanupInterval) {
            report +=
                "keyauth-server: warning: --overlap \(DurationText.text(overlap)) is shorter than the certificate "
                + "lifetime (\(DurationText.text(lifetime)), --ssh-certificate-lifetime) plus the cleanup interval "
                + "(\(DurationText.text(cleanupInterval)), --cleanup-interval), until which servers still sign with "
                + "the old CA: hosts that fetch the CA lines or the revocation list refuse its certificates after "
                + "the overlap, before they expire, so their users need keyauth ssh cert again\n"
        }
        return report
    }

    /// `ssh-ca krl FILE`: the KRL of every revoked device's certificates, and with a principals
    /// file of those naming principals it no longer grants, written atomically.
    private static func writeRevocationList(
        to file: String, keyFile: String, principalsFile: String?, database: String, output: Output
    ) -> Int32 {
        let authorities: SSHCertificateAuthorities
        do {
            authorities = try SSHCertificateAuthorities(keyFile: keyFile)
        } catch {
            return keyFileFailure(error, output: output)
        }
        let principalMap: SSHPrincipalMapFile?
        do {
            principalMap = try principalsFile.map { (path) throws(KeyAuthError) in try SSHPrincipalMapFile(path: path) }
        } catch {
            output.error("keyauth-server: \(error.message)\n")
            switch error.code {
            case .keyNotFound: return 66
            case .keyUnprotected, .invalidArgument: return ExitStatus.dataError
            default: return ExitStatus.failure
            }
        }
        // One time for the list and its report.
        let time = ServerClock.now()
        return withStorage(database, output: output) { storage in
            let issuer = SSHCertificateIssuer(
                authorities: authorities, settings: SSHCertificateIssuer.Settings(),
                audit: AuditTrail(storage: storage),
                now: { time },
                revocationLists: SSHRevocationListCache(signal: RevocationSignal(), now: { time }),
                principalMap: principalMap)
            let devices = try DeviceRegistry.administering(storage).allDevices()
            let deleted = try storage.sshRevokedKeys(listedAfter: time)
            // Without the principals file the rules are unknown here: no certificate is judged.
            let certificates =
                principalMap == nil
                ? [] : try storage.sshCertificates(validAfter: SSHCertificateIssuer.listedAfter(time))
            try SecureFile.write(
                try issuer.revocationList(of: devices, deleted: deleted, certificates: certificates), to: file)
            let revoked = devices.filter { $0.status == .revoked }.count
            let authorityCount = authorities.current.revoked(at: time).count
            let retired = authorityCount > 0 ? ", and every certificate of \(authorityCount) retired SSH CA(s)" : ""
            let outgrown = issuer.outgrown(certificates).count
            let principals = principalMap == nil ? "" : ", \(outgrown) certificate(s) of principals no longer granted"
            output.error(
                "keyauth-server: wrote \(file), revoking the certificates of \(revoked) revoked device(s) and "
                    + "\(deleted.count) deleted device(s)\(principals)\(retired)\n")
        }
    }

    /// The exit status for a CA key file that cannot be used, after saying why.
    private static func keyFileFailure(_ error: KeyAuthError, output: Output) -> Int32 {
        // A missing file is usually a first try before `ssh-ca init`, or a path mistyped.
        let hint =
            error.code == .keyNotFound
            ? "; `keyauth-server ssh-ca init --ssh-ca-key-file PATH` makes one, or give the path the server uses" : ""
        output.error("keyauth-server: \(error.message)\(hint)\n")
        switch error.code {
        case .keyNotFound: return 66
        case .keyCorrupt, .keyRejected, .keyUnprotected: return ExitStatus.dataError
        default: return ExitStatus.failure
        }
    }
}
