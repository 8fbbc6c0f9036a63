import KeyAuth

/// An OpenSSH key revocation list (KRL, OpenSSH's `PROTOCOL.krl`) naming the certificates of
/// revoked devices, for hosts' `RevokedKeys`: a revoked device's certificate is refused before
/// it expires once the host has the new list. It also names by serial each certificate that
/// carries a principal the principals file no longer grants its user.
///
/// A revoked device's certificates are named by their key ID (`keyauth user USER device KID`),
/// which this CA gives every certificate of one device, so the list stays one entry per revoked
/// device whatever it was issued; and the device's key itself is named by its SHA-256
/// fingerprint, which revokes its certificates under any CA (``SSHRevocations``), a retired one
/// included. Fingerprint sections need OpenSSH 7.9 or later on the hosts.
package enum SSHRevocationList {
    /// `SSHKRL\n\0`.
    static let magic: UInt64 = 0x5353_484B_524C_0A00
    static let formatVersion: UInt32 = 1
    static let certificatesSection: UInt8 = 1
    static let serialListSection: UInt8 = 0x20
    static let keyIDSection: UInt8 = 0x23
    static let sha256FingerprintSection: UInt8 = 5

    /// The list revoking every certificate whose key ID or serial is in `revocations` of each CA
    /// in `authorities` (their public key blobs), and every key (and so every certificate of it,
    /// under any CA) whose SHA-256 fingerprint is in `revocations`.
    ///
    /// - Parameters:
    ///   - generatedAt: seconds since 1970, also the list's version, so that a newer list has a
    ///     larger one.
    package static func encoded(
        revoking revocations: SSHRevocations, ofAuthorities authorities: [[UInt8]], generatedAt: UInt64
    ) throws(KeyAuthError) -> [UInt8] {
        var list = SSHWireWriter()
        list.uint64(magic)
        list.uint32(formatVersion)
        list.uint64(generatedAt)
        list.uint64(generatedAt)
        list.uint64(0)  // flags
        try list.string([])  // reserved
        try list.string("keyauth-server: certificates of revoked devices")
        if !revocations.keyIDs.isEmpty || !revocations.serials.isEmpty {
            try appendCertificateSections(revocations, ofAuthorities: authorities, to: &list)
        }
        if !revocations.keyFingerprints.isEmpty {
            var hashes = SSHWireWriter()
            for fingerprint in revocations.keyFingerprints { try hashes.string(fingerprint) }
            list.byte(sha256FingerprintSection)
            try list.string(hashes.bytes)
        }
        return list.bytes
    }

    /// One certificates section per CA, revoking the serials (a serial list) and the key IDs of
    /// `revocations`. A serial is revoked under every CA: serials are random 64-bit numbers, so
    /// one of another CA's certificates matches by chance one time in 2^64.
    private static func appendCertificateSections(
        _ revocations: SSHRevocations, ofAuthorities authorities: [[UInt8]], to list: inout SSHWireWriter
    ) throws(KeyAuthError) {
        var serials = SSHWireWriter()
        for serial in revocations.serials { serials.uint64(serial) }
        var identifiers = SSHWireWriter()
        for keyID in revocations.keyIDs { try identifiers.string(keyID) }
        for authority in authorities {
            var certificates = SSHWireWriter()
            try certificates.string(authority)
            try certificates.string([])  // reserved
            if !revocations.serials.isEmpty {
                certificates.byte(serialListSection)
                try certificates.string(serials.bytes)
            }
            if !revocations.keyIDs.isEmpty {
                certificates.byte(keyIDSection)
                try certificates.string(identifiers.bytes)
            }
            list.byte(certificatesSection)
            try list.string(certificates.bytes)
        }
    }

    /// Each key ID once, in byte order: what `ssh-keygen -k` writes, and what makes two lists of
    /// the same devices equal.
    static func ordered(_ keyIDs: [String]) -> [String] {
        Set(keyIDs).sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }
}
