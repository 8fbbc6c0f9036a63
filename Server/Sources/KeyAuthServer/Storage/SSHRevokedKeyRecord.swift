/// A device key that `delete-user` deleted, kept for the SSH revocation list until no
/// certificate of it can still be valid (table `ssh_revoked_keys`, schema version 14).
///
/// The revocation list is built from device records, so without this a deleted device (active,
/// or revoked earlier) would drop out of it while its certificates, up to the longest lifetime,
/// still open hosts.
package struct SSHRevokedKeyRecord: Sendable, Hashable {
    /// The device's key ID (the key's RFC 7638 fingerprint).
    package var kid: String
    /// The user the device belonged to, which its certificates' key ID names.
    package var user: String
    /// The device's public key, SPKI PEM, which the list names by its SSH fingerprint.
    package var publicKeyPEM: String
    /// Until when the list names it, seconds since 1970; the cleanup deletes it after.
    package var listedUntil: Int64

    /// Creates a record.
    package init(kid: String, user: String, publicKeyPEM: String, listedUntil: Int64) {
        self.kid = kid
        self.user = user
        self.publicKeyPEM = publicKeyPEM
        self.listedUntil = listedUntil
    }
}
