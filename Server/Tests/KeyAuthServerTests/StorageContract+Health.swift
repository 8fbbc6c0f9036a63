import Testing

@testable import KeyAuthServer

extension StorageContract {
    static let healthChecks = [
        StorageCheck(
            "upgrades a version-7 database to the health probes' table, keeping its devices and clients",
            upgradesVersionSeven)
    ]

    /// A database as the release with schema version 7 left it.
    static func upgradesVersionSeven(_ database: StorageContractDatabase) throws {
        let connection = try database.connect()
        try SQLSchema.build(on: connection, upTo: 7)
        try connection.execute(
            "INSERT INTO devices (kid, user_name, name, public_key_pem, status, created_at) "
                + "VALUES ('kid-old', 'alice', 'old', 'pem', 'active', 5)")
        try connection.execute(
            "INSERT INTO clients (client_id, name, secret_hash, created_at) VALUES ('desk', 'Desk', $1, 5)",
            [.blob([1, 2, 3])])

        let storage = try database.open()
        defer { storage.close() }
        try storage.healthCheck()
        #expect(try storage.device(kid: "kid-old")?.user == "alice")
        #expect(try storage.client(id: "desk")?.name == "Desk")
        #expect(try connection.execute("SELECT COUNT(*) FROM health_probes").firstRow?.integer(0) == 0)
    }
}
