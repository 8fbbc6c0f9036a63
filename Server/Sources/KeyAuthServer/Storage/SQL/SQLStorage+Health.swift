/// The `health_probes` table: `/healthz`'s proof that the database takes durable writes.
extension SQLStorage {
    /// How long the row of an instance that stopped probing is kept: a week, so that a host
    /// that is gone (a replaced container) leaves no row for good.
    static let healthProbeRetention: Int64 = 7 * 86_400

    package func probeWrite(instance: String, at time: Int64) throws(StorageError) {
        let (cutoff, overflow) = time.subtractingReportingOverflow(Self.healthProbeRetention)
        let staleBefore = overflow ? Int64.min : cutoff
        // Outside the request's scope, so that the write returns only once it is durable (or
        // failed): inside it, SQLite's group commit would return before the fsync.
        let outcome = DurabilityScope.$current.withValue(nil) {
            Result { () throws(StorageError) in
                try database.write { connection throws(StorageError) in
                    try connection.execute(
                        """
                        INSERT INTO health_probes (instance, probed_at, probes) VALUES ($1, $2, 1)
                        ON CONFLICT (instance) DO UPDATE
                        SET probed_at = excluded.probed_at, probes = health_probes.probes + 1
                        """,
                        [.text(instance), .integer(time)])
                    try connection.execute("DELETE FROM health_probes WHERE probed_at < $1", [.integer(staleBefore)])
                    return ()
                }
            }
        }
        try outcome.get()
    }
}
