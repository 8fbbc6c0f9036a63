/// ``SQLStorage`` in a PostgreSQL database, under the name by which callers choose it:
/// `PostgresStorage(url:)`.
package typealias PostgresStorage = SQLStorage

extension SQLStorage {
    /// Connects to the PostgreSQL database at `url` and applies migrations.
    ///
    /// Everything that makes several server instances one service lives in the database:
    /// devices and their states, the replay cache, enrollment codes and the server signing
    /// keys. So a `jti` accepted by one instance is refused by all, a code works once in total,
    /// and a token signed by one instance verifies on every other. While the database is down,
    /// methods throw `.unavailable`, which the server answers with 503; the pool reconnects by
    /// itself when it comes back.
    ///
    /// - Parameters:
    ///   - url: `postgres://user:password@host:port/dbname`, optionally with libpq query
    ///     parameters (`?sslmode=require`). A `connect_timeout` of 3 s applies unless it sets one.
    ///   - poolSize: connections kept open; each server request thread holds one per call.
    ///   - checkoutTimeoutSeconds: how long a call waits for a free connection before failing
    ///     with `.unavailable`.
    ///   - now: the clock, for the migration record.
    ///   - migrating: false for admin commands, which require the latest schema instead.
    /// - Throws: ``StorageError`` with `.invalidLocation` for a URL libpq would read otherwise
    ///   than written (it is not tried), `.unavailable` when the database cannot be reached,
    ///   `.schemaTooNew` when a newer server migrated it, `.queryFailed` when migrating fails.
    package convenience init(
        url: String, poolSize: Int = defaultPoolSize, checkoutTimeoutSeconds: Int = 10,
        now: @Sendable () -> Int64 = { ServerClock.now() }, migrating: Bool = true
    ) throws(StorageError) {
        if let problem = PostgresLocation.problem(in: url) { throw StorageError(.invalidLocation, problem) }
        let location = PostgresLocation(url)
        try self.init(
            database: PostgresConnectionPool(
                location: location, size: poolSize, checkoutTimeoutSeconds: checkoutTimeoutSeconds),
            location: location.redacted, now: now, migrating: migrating)
    }

    /// The connections a server keeps open unless `--db-connections` says otherwise: enough to
    /// keep two cores' worth of statements in flight, few enough that several instances stay
    /// well inside PostgreSQL's default `max_connections` of 100.
    package static let defaultPoolSize = 4

    /// `url` with its password masked, for logging a `--db` value before connecting.
    package static func redacted(_ url: String) -> String {
        PostgresLocation(url).redacted
    }
}
