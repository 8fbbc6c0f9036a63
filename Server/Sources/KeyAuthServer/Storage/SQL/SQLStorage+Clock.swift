extension SQLStorage {
    /// `clock_timestamp()`, not `now()`: the latter is the start of the transaction, which a
    /// pooled connection may have begun a while ago.
    package func databaseTime() throws(StorageError) -> Int64? {
        guard dialect == .postgres else { return nil }
        return try database.read { connection throws(StorageError) in
            try connection.execute("SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp())) AS BIGINT)")
                .firstRow?.integer(0)
        }
    }
}
