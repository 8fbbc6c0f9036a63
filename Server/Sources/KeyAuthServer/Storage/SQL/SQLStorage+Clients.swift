/// The `clients` table: the applications allowed to start sign-in requests.
extension SQLStorage {
    static let clientColumns =
        "client_id, name, secret_hash, created_at, redirect_uris, post_logout_redirect_uris, is_public, kind, allowed_users"

    package func insertClient(_ client: ClientRecord) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO clients (\(Self.clientColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                [
                    .text(client.id), .text(client.name), .blob(client.secretHash), .integer(client.createdAt),
                    .text(client.redirectURIs.joined(separator: " ")),
                    .text(client.postLogoutRedirectURIs.joined(separator: " ")), .integer(client.isPublic ? 1 : 0),
                    .text(client.kind.rawValue), .text(client.allowedUsers.joined(separator: " ")),
                ]
            ).affectedRowCount == 1
        }
    }

    package func client(id: String) throws(StorageError) -> ClientRecord? {
        try database.read { connection throws(StorageError) in
            try connection.queryFirst("SELECT \(Self.clientColumns) FROM clients WHERE client_id = $1", [.text(id)]) {
                row throws(StorageError) in try ClientRecord(row: row)
            }
        }
    }

    package func allClients() throws(StorageError) -> [ClientRecord] {
        try database.read { connection throws(StorageError) in
            try connection.query("SELECT \(Self.clientColumns) FROM clients ORDER BY created_at, client_id") {
                row throws(StorageError) in try ClientRecord(row: row)
            }
        }
    }

    package func deleteClient(id: String) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM clients WHERE client_id = $1", [.text(id)]).affectedRowCount == 1
        }
    }
}

extension ClientRecord {
    /// Reads a row of ``SQLStorage/clientColumns``.
    init(row: SQLRow) throws(StorageError) {
        guard let id = row.text(0), let name = row.text(1), let hash = row.blob(2), let createdAt = row.integer(3),
            let redirects = row.text(4), let logoutRedirects = row.text(5), let isPublic = row.integer(6),
            let kind = row.text(7).flatMap(ClientKind.init(rawValue:)), let allowedUsers = row.text(8)
        else { throw StorageError(.queryFailed, "a client row is incomplete") }
        // Redirect URIs never contain a space (RedirectURI refuses them), so a space separates them.
        self.init(
            id: id, name: name, secretHash: hash, createdAt: createdAt,
            redirectURIs: redirects.split(separator: " ").map(String.init),
            postLogoutRedirectURIs: logoutRedirects.split(separator: " ").map(String.init), isPublic: isPublic != 0,
            // User names have no space (InputRules), so a space separates them too.
            kind: kind, allowedUsers: allowedUsers.split(separator: " ").map(String.init))
    }
}
