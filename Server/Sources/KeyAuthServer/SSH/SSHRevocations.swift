import KeyAuth

/// What a revocation list names: the key IDs of the certificates of revoked devices, the SHA-256
/// fingerprints of those devices' own public keys, and those of the CAs no longer published; and
/// the serials of certificates that name a principal their user is no longer granted.
///
/// A key ID is revoked only under the CAs whose sections name it, so a CA that rotation or
/// `ssh-ca retire` took out of the list would take its revocations with it while hosts that
/// kept its `TrustedUserCAKeys` line still accept its certificates. A key's fingerprint is
/// revoked under every CA: `sshd` checks the certified key itself against the list, so every
/// certificate of a revoked device's key is refused whoever signed it. `sshd` checks the key that
/// signed a certificate against the list as well, so a CA's fingerprint refuses every
/// certificate it signed.
package struct SSHRevocations: Sendable, Equatable {
    /// Each key ID once, in byte order.
    package let keyIDs: [String]
    /// Each SHA-256 of a public key blob once, in byte order: the devices' and the CAs'.
    package let keyFingerprints: [[UInt8]]
    /// Each certificate serial once, ascending; never 0, which OpenSSH refuses in a list.
    package let serials: [UInt64]

    /// The revocations of `keyIDs`, of the device keys `keyFingerprints`, of the CA keys
    /// `authorityFingerprints` and of the certificates `serials`, each once and ordered, so that
    /// two lists of the same devices, CAs and certificates are equal.
    package init(
        keyIDs: [String], keyFingerprints: [[UInt8]], authorityFingerprints: [[UInt8]] = [], serials: [UInt64] = []
    ) {
        self.keyIDs = SSHRevocationList.ordered(keyIDs)
        self.keyFingerprints = Set(keyFingerprints + authorityFingerprints).sorted {
            $0.lexicographicallyPrecedes($1)
        }
        self.serials = Set(serials).subtracting([0]).sorted()
    }

    /// Whether nothing is revoked.
    package var isEmpty: Bool { keyIDs.isEmpty && keyFingerprints.isEmpty && serials.isEmpty }

    /// The SHA-256 of the SSH public key blob of the device key `pem` (what `ssh-keygen -l`
    /// shows in base64); nil for a key this CA never certifies, which cannot be read as RSA.
    static func fingerprint(ofDeviceKey pem: String) -> [UInt8]? {
        guard let key = try? RSAPublicKey(pemRepresentation: Array(pem.utf8)),
            let blob = try? SSHCertificateAuthority.publicKeyBlob(of: .rsa(key))
        else { return nil }
        return try? CryptoPrimitives.sha256(blob)
    }
}
