/// The `ssh_certificates` table: the SSH certificates issued and not yet expired, which the
/// revocation list names by serial once their principals are no longer all granted.
extension SQLStorage {
    package func recordSSHCertificate(_ record: SSHCertificateRecord) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                """
                INSERT INTO ssh_certificates (serial, user_name, kid, principals, valid_before)
                VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING
                """,
                [
                    .integer(Int64(bitPattern: record.serial)), .text(record.user), .text(record.kid),
                    .text(record.principals.joined(separator: "\n")), .integer(record.validBefore),
                ]
            ).affectedRowCount == 1
        }
    }

    package func sshCertificates(validAfter time: Int64) throws(StorageError) -> [SSHCertificateRecord] {
        let records = try database.read { connection throws(StorageError) in
            try connection.query(
                """
                SELECT serial, user_name, kid, principals, valid_before FROM ssh_certificates
                WHERE valid_before > $1
                """,
                [.integer(time)]
            ) { row throws(StorageError) in
                guard let serial = row.integer(0), let user = row.text(1), let kid = row.text(2),
                    let principals = row.text(3), let validBefore = row.integer(4)
                else {
                    throw StorageError(.queryFailed, "an ssh_certificates row is incomplete")
                }
                return SSHCertificateRecord(
                    serial: UInt64(bitPattern: serial), user: user, kid: kid,
                    principals: principals.split(separator: "\n").map(String.init), validBefore: validBefore)
            }
        }
        // By the serial as the certificate has it, unsigned: the database orders the signed form.
        return records.sorted { $0.serial < $1.serial }
    }

    package func purgeSSHCertificates(validUntil time: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM ssh_certificates WHERE valid_before <= $1", [.integer(time)])
                .affectedRowCount
        }
    }
}
