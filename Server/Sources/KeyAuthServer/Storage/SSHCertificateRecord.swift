/// An SSH user certificate the server issued, kept until it expires (table `ssh_certificates`,
/// schema version 17), so that the revocation list can name it by serial once the principals
/// file no longer grants its user one of the principals it carries.
///
/// Without this record a principal taken out of `--ssh-principals-file` would keep opening
/// hosts, through the certificates issued before, for up to `--ssh-certificate-lifetime`: the
/// list names devices and CAs, and revoking the device would revoke its certificates of the
/// principals it still has as well.
package struct SSHCertificateRecord: Sendable, Hashable {
    /// The certificate's serial: random, and never 0, which a revocation list cannot name.
    package var serial: UInt64
    /// The user it was issued to.
    package var user: String
    /// The device whose key it certifies.
    package var kid: String
    /// Its principals, in its order.
    package var principals: [String]
    /// Its `valid before`, seconds since 1970.
    package var validBefore: Int64

    /// Creates a record.
    package init(serial: UInt64, user: String, kid: String, principals: [String], validBefore: Int64) {
        self.serial = serial
        self.user = user
        self.kid = kid
        self.principals = principals
        self.validBefore = validBefore
    }
}
