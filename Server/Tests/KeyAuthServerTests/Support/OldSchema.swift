@testable import KeyAuthServer

extension SQLSchema {
    /// Applies the migrations up to `version` on `connection` and records them: the database as
    /// the release whose schema ended at `version` left it, for the tests of later migrations.
    static func build(on connection: any SQLConnection, upTo version: Int64) throws(StorageError) {
        let integer = connection.dialect.integer
        try connection.execute(
            "CREATE TABLE schema_migrations (version \(integer) PRIMARY KEY, applied_at \(integer) NOT NULL)")
        for migration in migrations where migration.version <= version {
            for statement in migration.statements(connection.dialect) { try connection.execute(statement) }
            try connection.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)", [.integer(migration.version)])
        }
    }
}
