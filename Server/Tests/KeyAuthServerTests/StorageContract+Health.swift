import Testing

@testable import KeyAuthServer

extension StorageContract {
    static let healthChecks = [
        StorageCheck(
            "upgrades a version-8 database to the health probes' table, keeping its devices and clients",
            upgradesVersionEight),
        StorageCheck(
            "probes writes durably in one row per instance, forgetting instances gone for a week", probesWrites),
    ]

    /// The rows of `health_probes`, by instance.
    private static func healthProbes(_ database: StorageContractDatabase) throws -> [String: [Int64]] {
        var rows: [String: [Int64]] = [:]
        for row in try database.connect().execute("SELECT instance, probed_at, probes FROM health_probes").rows {
            rows[row.text(0) ?? "?"] = [row.integer(1) ?? -1, row.integer(2) ?? -1]
        }
        return rows
    }

    static func probesWrites(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        try storage.probeWrite(instance: "host-a", at: 1_000)
        try storage.probeWrite(instance: "host-a", at: 1_000)
        try storage.probeWrite(instance: "host-b", at: 1_000)
        // A second server on the same host shares the row.
        let neighbour = try database.open()
        try neighbour.probeWrite(instance: "host-a", at: 1_002)
        neighbour.close()
        #expect(try healthProbes(database) == ["host-a": [1_002, 3], "host-b": [1_000, 1]])

        // Inside a request's durability scope the probe still returns only once it is durable:
        // nothing is left for the scope to wait for.
        let (_, scope) = try DurabilityScope.run { () throws(StorageError) in
            try storage.probeWrite(instance: "host-a", at: 2_000)
        }
        guard case .durable = scope.outcome else {
            Issue.record("the probe left its write to the request's scope")
            return
        }

        // A week after its last probe, host-b's row goes; host-a's stays and counts on.
        let weekLater = 1_000 + SQLStorage.healthProbeRetention + 1
        try storage.probeWrite(instance: "host-a", at: weekLater)
        #expect(try healthProbes(database) == ["host-a": [weekLater, 5]])

        storage.close()
        #expect(
            errorCode { () throws(StorageError) in try storage.probeWrite(instance: "host-a", at: weekLater) }
                == .closed)
    }

    /// A database as a release with schema version 8 left it.
    static func upgradesVersionEight(_ database: StorageContractDatabase) throws {
        let connection = try database.connect()
        try SQLSchema.build(on: connection, upTo: 8)
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
