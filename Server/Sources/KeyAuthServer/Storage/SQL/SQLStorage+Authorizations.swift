/// The tables of the OpenID Connect provider: `authorization_codes` and `revoked_access_tokens`.
extension SQLStorage {
    static let authorizationCodeColumns = """
        code_hash, client_id, redirect_uri, code_challenge, nonce, scope, user_name, approving_kid, auth_time, \
        methods, session_id, expires_at, redeemed_at, access_token_jti, access_token_expires_at, acr
        """

    package func insertAuthorizationCode(_ record: AuthorizationCodeRecord) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                """
                INSERT INTO authorization_codes (\(Self.authorizationCodeColumns))
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
                """,
                record.columnValues)
            return ()
        }
    }

    package func authorizationCode(codeHash: [UInt8]) throws(StorageError) -> AuthorizationCodeRecord? {
        try database.read { connection throws(StorageError) in
            try Self.authorizationCode(codeHash: codeHash, on: connection)
        }
    }

    private static func authorizationCode(codeHash: [UInt8], on connection: any SQLConnection) throws(StorageError)
        -> AuthorizationCodeRecord?
    {
        try connection.queryFirst(
            "SELECT \(authorizationCodeColumns) FROM authorization_codes WHERE code_hash = $1", [.blob(codeHash)]
        ) { row throws(StorageError) in try AuthorizationCodeRecord(row: row) }
    }

    /// The conditional update decides; the read after it, in the same transaction, says what
    /// the winner recorded.
    package func redeemAuthorizationCode(
        codeHash: [UInt8], at time: Int64, accessTokenJTI: String, accessTokenExpiresAt: Int64, audit: AuditEvent?
    ) throws(StorageError) -> AuthorizationCodeRedemption {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> AuthorizationCodeRedemption in
                let before = try Self.authorizationCode(codeHash: codeHash, on: connection)
                if let before, before.redeemedAt == nil,
                    try !Self.isActive(before.approvingKID, of: before.user, in: connection)
                {
                    return .approverInactive
                }
                let updated = try connection.execute(
                    """
                    UPDATE authorization_codes SET redeemed_at = $2, access_token_jti = $3, access_token_expires_at = $4
                    WHERE code_hash = $1 AND redeemed_at IS NULL AND expires_at > $2
                    """,
                    [.blob(codeHash), .integer(time), .text(accessTokenJTI), .integer(accessTokenExpiresAt)]
                ).affectedRowCount
                if updated == 1, let before {
                    if let audit { try Self.insertAuditRow(audit, in: connection) }
                    return .redeemed(before)
                }
                guard let current = try Self.authorizationCode(codeHash: codeHash, on: connection),
                    current.redeemedAt != nil
                else { return .unknown }
                return .alreadyRedeemed(current)
            }
        }
    }

    package func revokeAccessToken(jti: String, expiresAt: Int64) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO revoked_access_tokens (jti, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                [.text(jti), .integer(expiresAt)])
            return ()
        }
    }

    package func isAccessTokenRevoked(jti: String) throws(StorageError) -> Bool {
        try database.read { connection throws(StorageError) in
            try connection.execute("SELECT 1 FROM revoked_access_tokens WHERE jti = $1", [.text(jti)]).firstRow != nil
        }
    }

    package func purgeAuthorizations(now: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            let codes = try connection.execute(
                """
                DELETE FROM authorization_codes
                WHERE expires_at < $1 AND (access_token_expires_at IS NULL OR access_token_expires_at < $1)
                """,
                [.integer(now)]
            ).affectedRowCount
            let revoked = try connection.execute(
                "DELETE FROM revoked_access_tokens WHERE expires_at < $1", [.integer(now)]
            ).affectedRowCount
            return codes + revoked
        }
    }
}

extension AuthorizationCodeRecord {
    /// Reads a row of ``SQLStorage/authorizationCodeColumns``.
    init(row: SQLRow) throws(StorageError) {
        guard let codeHash = row.blob(0), let clientID = row.text(1), let redirectURI = row.text(2),
            let challenge = row.text(3), let scope = row.text(5), let user = row.text(6), let kid = row.text(7),
            let authTime = row.integer(8), let methods = row.text(9), let sessionID = row.text(10),
            let expiresAt = row.integer(11)
        else { throw StorageError(.queryFailed, "an authorization code row is incomplete") }
        self.init(
            codeHash: codeHash, clientID: clientID, redirectURI: redirectURI, codeChallenge: challenge,
            nonce: row.text(4), scope: scope, user: user, approvingKID: kid, authTime: authTime,
            methods: methods.split(separator: " ").map(String.init), sessionID: sessionID, expiresAt: expiresAt,
            redeemedAt: row.integer(12), accessTokenJTI: row.text(13), accessTokenExpiresAt: row.integer(14),
            acr: row.text(15))
    }

    /// The values of ``SQLStorage/authorizationCodeColumns``, in order.
    var columnValues: [SQLValue] {
        [
            .blob(codeHash), .text(clientID), .text(redirectURI), .text(codeChallenge), SQLValue(nonce), .text(scope),
            .text(user), .text(approvingKID), .integer(authTime), .text(methods.joined(separator: " ")),
            .text(sessionID), .integer(expiresAt), SQLValue(redeemedAt), SQLValue(accessTokenJTI),
            SQLValue(accessTokenExpiresAt), SQLValue(acr),
        ]
    }
}
