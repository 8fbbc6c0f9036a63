/// The `browser_sessions` table: the account page's server-side sessions.
extension SQLStorage {
    static let browserSessionColumns = """
        id_hash, csrf_token, user_name, sign_in_request_id, binding_code, approving_kid, methods, created_at, \
        expires_at, signed_in_at, signed_in_for
        """

    package func insertBrowserSession(_ session: BrowserSessionRecord) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO browser_sessions (\(Self.browserSessionColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                session.columnValues)
            return ()
        }
    }

    package func browserSession(idHash: [UInt8]) throws(StorageError) -> BrowserSessionRecord? {
        try database.read { connection throws(StorageError) in
            try connection.queryFirst(
                "SELECT \(Self.browserSessionColumns) FROM browser_sessions WHERE id_hash = $1", [.blob(idHash)]
            ) { row throws(StorageError) in try BrowserSessionRecord(row: row) }
        }
    }

    /// A delete that must find the old row, then the insert, in one transaction.
    package func replaceBrowserSession(
        idHash: [UInt8], with session: BrowserSessionRecord
    ) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> Bool in
                let deleted = try connection.execute(
                    "DELETE FROM browser_sessions WHERE id_hash = $1", [.blob(idHash)]
                ).affectedRowCount
                guard deleted == 1 else { return false }
                try connection.execute(
                    "INSERT INTO browser_sessions (\(Self.browserSessionColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                    session.columnValues)
                return true
            }
        }
    }

    package func extendBrowserSession(
        idHash: [UInt8], until expiresAt: Int64, ifLiveAt time: Int64
    ) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "UPDATE browser_sessions SET expires_at = $2 WHERE id_hash = $1 AND expires_at > $3",
                [.blob(idHash), .integer(expiresAt), .integer(time)]
            ).affectedRowCount == 1
        }
    }

    package func deleteBrowserSession(idHash: [UInt8], expiredAt time: Int64) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "DELETE FROM browser_sessions WHERE id_hash = $1 AND expires_at <= $2", [.blob(idHash), .integer(time)])
            return ()
        }
    }

    package func deleteBrowserSession(idHash: [UInt8]) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM browser_sessions WHERE id_hash = $1", [.blob(idHash)])
            return ()
        }
    }

    package func purgeBrowserSessions(now: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM browser_sessions WHERE expires_at < $1", [.integer(now)])
                .affectedRowCount
        }
    }
}

extension BrowserSessionRecord {
    /// Reads a row of ``SQLStorage/browserSessionColumns``.
    init(row: SQLRow) throws(StorageError) {
        guard let idHash = row.blob(0), let csrf = row.text(1), let user = row.text(2), let code = row.text(4),
            let methods = row.text(6), let createdAt = row.integer(7), let expiresAt = row.integer(8)
        else { throw StorageError(.queryFailed, "a browser session row is incomplete") }
        self.init(
            idHash: idHash, csrfToken: csrf, user: user, signInRequestID: row.text(3), bindingCode: code,
            approvingKID: row.text(5), methods: methods.split(separator: " ").map(String.init), createdAt: createdAt,
            expiresAt: expiresAt, signedInAt: row.integer(9), signedInFor: row.text(10))
    }

    /// The values of ``SQLStorage/browserSessionColumns``, in order.
    var columnValues: [SQLValue] {
        [
            .blob(idHash), .text(csrfToken), .text(user), SQLValue(signInRequestID), .text(bindingCode),
            SQLValue(approvingKID), .text(methods.joined(separator: " ")), .integer(createdAt), .integer(expiresAt),
            SQLValue(signedInAt), SQLValue(signedInFor),
        ]
    }
}
