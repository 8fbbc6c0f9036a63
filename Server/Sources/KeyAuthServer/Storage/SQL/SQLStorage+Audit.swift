/// The `audit_events` table: administrative actions, kept for good.
extension SQLStorage {
    package func insertAuditEvent(_ event: AuditEvent) throws(StorageError) {
        try database.write { connection throws(StorageError) in try Self.insertAuditRow(event, in: connection) }
    }

    /// Inserts `event` in the caller's transaction (a device's insert writes its recovery-code
    /// audit entry this way, ``DeviceEnrollmentCode/recovery(code:notice:audit:)``).
    static func insertAuditRow(_ event: AuditEvent, in connection: any SQLConnection) throws(StorageError) {
        try connection.execute(
            """
            INSERT INTO audit_events (at, action, actor, user_name, subject, detail)
            VALUES ($1, $2, $3, $4, $5, $6)
            """,
            [
                .integer(event.time), .text(event.action.rawValue), .text(event.actor), SQLValue(event.user),
                SQLValue(event.subject), SQLValue(event.detail),
            ])
    }

    package func auditEvents(since time: Int64) throws(StorageError) -> [AuditEvent] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                "SELECT at, action, actor, user_name, subject, detail FROM audit_events WHERE at >= $1 ORDER BY at, id",
                [.integer(time)]
            ) { row throws(StorageError) in
                guard let at = row.integer(0), let action = row.text(1), let actor = row.text(2) else {
                    throw StorageError(.queryFailed, "an audit event row is incomplete")
                }
                return AuditEvent(
                    time: at, action: AuditAction(rawValue: action), actor: actor, user: row.text(3),
                    subject: row.text(4), detail: row.text(5))
            }
        }
    }
}
