/// The `ssh_revoked_keys` table: deleted devices' keys that the SSH revocation list keeps naming
/// until their certificates can no longer be valid. `deleteUser` writes it.
extension SQLStorage {
    package func sshRevokedKeys(listedAfter now: Int64) throws(StorageError) -> [SSHRevokedKeyRecord] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                """
                SELECT kid, user_name, public_key_pem, listed_until FROM ssh_revoked_keys
                WHERE listed_until > $1 ORDER BY kid
                """,
                [.integer(now)]
            ) { row throws(StorageError) in
                guard let kid = row.text(0), let user = row.text(1), let pem = row.text(2),
                    let listedUntil = row.integer(3)
                else {
                    throw StorageError(.queryFailed, "an ssh_revoked_keys row is incomplete")
                }
                return SSHRevokedKeyRecord(kid: kid, user: user, publicKeyPEM: pem, listedUntil: listedUntil)
            }
        }
    }

    package func purgeSSHRevokedKeys(now: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM ssh_revoked_keys WHERE listed_until <= $1", [.integer(now)])
                .affectedRowCount
        }
    }

    /// Copies `user`'s devices that may hold certificates (active or revoked) into
    /// `ssh_revoked_keys` until `until`, inside the caller's transaction, before they are
    /// deleted; a key listed already keeps the later of its two times.
    static func listSSHKeys(of user: String, until: Int64, in connection: any SQLConnection) throws(StorageError) {
        try connection.execute(
            """
            INSERT INTO ssh_revoked_keys (kid, user_name, public_key_pem, listed_until)
            SELECT kid, user_name, public_key_pem, $2 FROM devices
            WHERE user_name = $1 AND status IN ('active', 'revoked')
            ON CONFLICT (kid) DO UPDATE SET user_name = excluded.user_name,
                public_key_pem = excluded.public_key_pem,
                listed_until = CASE WHEN excluded.listed_until > ssh_revoked_keys.listed_until
                    THEN excluded.listed_until ELSE ssh_revoked_keys.listed_until END
            """,
            [.text(user), .integer(until)])
    }
}
