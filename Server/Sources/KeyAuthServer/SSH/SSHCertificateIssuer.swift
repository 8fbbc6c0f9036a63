import KeyAuth

/// Issues OpenSSH user certificates to active devices (PROTOCOL.md section 11): the device's own
/// key, the user's name and the principals `--ssh-principals-file` maps to it, a short validity,
/// a record of each one until it expires and an audit record.
struct SSHCertificateIssuer: Sendable {
    /// What the operator decides about the certificates.
    struct Settings: Sendable {
        /// How long a certificate is valid (`--ssh-certificate-lifetime`, default 8 hours).
        var lifetime: Int64 = 8 * 3600
        /// Whether certificates carry `permit-port-forwarding` (`--ssh-port-forwarding`).
        var permitPortForwarding = true
    }

    /// How far before its issue a certificate becomes valid, for hosts whose clock is behind.
    static let backdating: Int64 = 300
    /// The longest `--ssh-certificate-lifetime`: a certificate cannot be recalled before it
    /// expires except by a host's KRL, so its life stays short.
    static let maximumLifetime: Int64 = 7 * 86_400
    /// How long the revocation list keeps naming a device that `delete-user` deleted: the
    /// longest lifetime of a certificate issued just before, plus the backdating again as the
    /// allowance for a host whose clock is behind.
    static let revocationRetention: Int64 = maximumLifetime + backdating
    /// The extension naming the device key, for hosts and logs that want to know which device.
    static let deviceExtension = "device-key@keyauth"
    /// The extension naming the device's assurance tier (`attested`, `tpm-unverified`,
    /// `software`), so that a host or its logs can tell a TPM-held key from a key file.
    static let deviceTierExtension = "device-tier@keyauth"

    /// The signing CA and, after a rotation, the previous one.
    let authorities: SSHCertificateAuthorities
    let settings: Settings
    let audit: AuditTrail
    let now: @Sendable () -> Int64
    /// The list `GET /v1/ssh/krl` serves, rebuilt at most every minute or after a revocation.
    let revocationLists: SSHRevocationListCache
    /// The principals besides the user's name (`--ssh-principals-file`); nil for the name only.
    var principalMap: SSHPrincipalMapFile? = nil

    /// Reads the CA files and the principals file again: the periodic cleanup's, so that
    /// `ssh-ca rotate`, `retire` and edits of the principals take effect without a restart.
    ///
    /// - Throws: `KeyAuthError` of the first file that could not be read (the others are still
    ///   read); what was read before stays in use.
    func reloadFiles() throws(KeyAuthError) {
        var failure: KeyAuthError?
        do { try authorities.reload() } catch { failure = error }
        let rules = principalMap?.generation
        do { try principalMap?.reload() } catch { failure = failure ?? error }
        // The list judges certificates by these rules: other rules make it out of date.
        if principalMap?.generation != rules { revocationLists.rebuildAtNextFetch() }
        if let failure { throw failure }
    }

    /// The key ID of every certificate of `device`: what `sshd` logs, and what the revocation
    /// list names once the device is revoked.
    static func keyID(of device: DeviceRecord) -> String {
        keyID(user: device.user, kid: device.kid)
    }

    /// The key ID of the certificates of `user`'s device `kid`.
    static func keyID(user: String, kid: String) -> String {
        "keyauth user \(user) device \(kid)"
    }

    /// The principals `user`'s certificates get now: the principals file's, or the user's name.
    func principals(for user: String) -> [String] {
        principalMap?.current.principals(for: user) ?? [user]
    }

    /// The KRL of the certificates of `devices` that are revoked and of the `deleted` devices,
    /// generated now: their key IDs for every CA published now, and their keys for any CA; the
    /// keys of the CAs no longer published, so every certificate they signed; and the serials
    /// of the `certificates` that name a principal their user is no longer granted.
    func revocationList(
        of devices: [DeviceRecord], deleted: [SSHRevokedKeyRecord], certificates: [SSHCertificateRecord]
    ) throws(KeyAuthError) -> [UInt8] {
        let time = now()
        let keys = authorities.current
        let revocations = try Self.revocations(
            of: devices, deleted: deleted, authorities: keys.revoked(at: time),
            outgrown: outgrown(certificates))
        return try SSHRevocationList.encoded(
            revoking: revocations, ofAuthorities: keys.published(at: time),
            generatedAt: UInt64(clamping: max(time, 0)))
    }

    /// The KRL of `registry`'s revoked and deleted devices and of the certificates of principals
    /// no longer granted, as `GET /v1/ssh/krl` serves it: from the cache, which reads the
    /// storage only when its list is too old, misses a revocation or predates the principals
    /// file as last read.
    func servedRevocationList(from registry: DeviceRegistry) throws -> SSHRevocationListCache.Snapshot {
        let time = now()
        let keys = authorities.current
        return try revocationLists.list(authorities: keys.published(at: time)) {
            try Self.revocations(
                of: try registry.allDevices(), deleted: try registry.storage.sshRevokedKeys(listedAfter: time),
                authorities: keys.revoked(at: time),
                outgrown: outgrown(try registry.storage.sshCertificates(validAfter: Self.listedAfter(time))))
        }
    }

    /// The certificates expiring after this are still listed when outgrown: a host whose clock
    /// is behind by the backdating may still accept them.
    static func listedAfter(_ time: Int64) -> Int64 {
        time.subtractingSaturating(backdating)
    }

    /// The serials of the `certificates` that name a principal the principals file (as last
    /// read) no longer grants their user.
    func outgrown(_ certificates: [SSHCertificateRecord]) -> [UInt64] {
        var granted: [String: Set<String>] = [:]
        return certificates.compactMap { certificate in
            let current =
                granted[certificate.user] ?? principalMap?.current.granted(to: certificate.user) ?? [certificate.user]
            granted[certificate.user] = current
            return certificate.principals.allSatisfy(current.contains) ? nil : certificate.serial
        }
    }

    /// What the list names for the revoked devices among `devices` and the `deleted` ones (the
    /// key IDs of their certificates and the fingerprints of their keys), for the CAs no
    /// longer published, `authorities` (the fingerprints of their public keys), and for the
    /// `outgrown` certificates (their serials).
    ///
    /// - Throws: `KeyAuthError` when a CA's key cannot be hashed: a list that silently left a
    ///   retired CA out would let hosts trust it again.
    static func revocations(
        of devices: [DeviceRecord], deleted: [SSHRevokedKeyRecord], authorities: [[UInt8]], outgrown: [UInt64] = []
    ) throws(KeyAuthError) -> SSHRevocations {
        let revoked = devices.filter { $0.status == .revoked }.map { ($0.user, $0.kid, $0.publicKeyPEM) }
        let listed = revoked + deleted.map { ($0.user, $0.kid, $0.publicKeyPEM) }
        return SSHRevocations(
            keyIDs: listed.map { keyID(user: $0.0, kid: $0.1) },
            keyFingerprints: listed.compactMap { SSHRevocations.fingerprint(ofDeviceKey: $0.2) },
            authorityFingerprints: try authorities.map { (blob) throws(KeyAuthError) in
                try CryptoPrimitives.sha256(blob)
            },
            serials: outgrown)
    }

    /// A certificate issued, as the endpoint answers it.
    struct Issued: Sendable {
        var certificate: SSHUserCertificate
        /// The `-cert.pub` line.
        var line: String
    }

    /// Certifies `device`'s registered key for its user.
    ///
    /// - Throws: `KeyAuthError` when the stored key cannot be read or signing fails;
    ///   ``StorageError`` when the certificate's record or its audit record cannot be written
    ///   (no certificate is returned then: one the revocation list could not name by its serial,
    ///   or unaudited, is not issued).
    func issue(for device: DeviceRecord) throws -> Issued {
        let rules = principalMap?.generation
        let principals = principals(for: device.user)
        // A certificate without principals is valid for every account on a host that trusts the
        // CA without principal files: never issued.
        guard !principals.isEmpty else {
            throw ServiceError(
                .accessDenied,
                "the SSH principals file grants this user's name to others as a role and nothing to this user")
        }
        let key = try RSAPublicKey(pemRepresentation: Array(device.publicKeyPEM.utf8))
        // A key registered before such keys were refused: anyone can compute its private key,
        // and a login with it gets a revoked device's answer; a token from before gets nothing.
        guard !key.hasROCAFingerprint else {
            throw ServiceError(
                .accessDenied, "the device key has the ROCA fingerprint (CVE-2017-15361): register a new key")
        }
        let issuedAt = now()
        let validBefore = issuedAt.addingSaturating(settings.lifetime)
        let serial = try recordedSerial(of: device, principals: principals, validBefore: validBefore)
        // Rules read again since the principals above: a list built from them meanwhile missed
        // this record, which may already name a principal they took away. On SQLite, inside a
        // request the record is only in the group commit's open batch until it is committed, and
        // a list rebuilt before that, on another connection, misses it too: so the rules are
        // compared again once it is.
        if let map = principalMap {
            let lists = revocationLists
            if map.generation != rules { lists.rebuildAtNextFetch() }
            DurabilityScope.current?.whenDurable { _ in
                if map.generation != rules { lists.rebuildAtNextFetch() }
            }
        }
        var extensions = ["permit-pty": "", "permit-user-rc": "", "permit-agent-forwarding": ""]
        if settings.permitPortForwarding { extensions["permit-port-forwarding"] = "" }
        extensions[Self.deviceExtension] = device.kid
        extensions[Self.deviceTierExtension] = device.tier.rawValue
        let certificate = SSHUserCertificate(
            publicKey: .rsa(key), serial: serial, keyID: Self.keyID(of: device),
            principals: principals,
            validAfter: UInt64(clamping: max(issuedAt.subtractingSaturating(Self.backdating), 0)),
            validBefore: UInt64(clamping: max(validBefore, 0)),
            extensions: extensions)
        let line = try certificate.line(
            signedBy: authorities.current.signing, nonce: try CryptoPrimitives.randomBytes(count: 32),
            comment: "\(device.user)@keyauth")
        try audit.record(
            .issueSSHCertificate, by: .device(kid: device.kid), user: device.user, subject: device.kid,
            detail: "serial \(serial), principals \(certificate.principals.joined(separator: ",")), valid until "
                + RFC3339.string(fromSeconds: Int64(clamping: certificate.validBefore)))
        return Issued(certificate: certificate, line: line)
    }

    /// A random serial, never 0 (which a revocation list cannot name) nor one recorded already,
    /// recorded for the certificate `device` is about to get, before it is signed.
    private func recordedSerial(of device: DeviceRecord, principals: [String], validBefore: Int64) throws -> UInt64 {
        for _ in 0..<4 {
            let serial = try CryptoPrimitives.randomBytes(count: 8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let record = SSHCertificateRecord(
                serial: serial, user: device.user, kid: device.kid, principals: principals, validBefore: validBefore)
            if serial != 0, try audit.storage.recordSSHCertificate(record) { return serial }
        }
        // Four draws of 64 random bits that all collide mean the random source is broken.
        throw KeyAuthError(.cryptoFailed, "no unused certificate serial could be drawn")
    }
}

extension AuditAction {
    /// An SSH user certificate was issued to a device.
    package static let issueSSHCertificate = AuditAction(rawValue: "issue-ssh-certificate")
}
