/// The SQL of a group commit's transaction: opening the batch, one savepoint per write, and the
/// commit that carries the deferred values. Called under the writer's lock or on the commit queue
/// (`SQLiteGroupCommitter.swift`), never on their own.
extension SQLiteGroupCommitter {
    /// The open batch, or a new one after `BEGIN IMMEDIATE`.
    static func openBatch(
        _ writer: inout Writer, on connection: SQLiteConnection, committer: ObjectIdentifier
    ) throws(StorageError) -> SQLiteCommitBatch {
        settleIfTransactionLost(&writer, on: connection)
        if let open = writer.open { return open }
        try connection.execute("BEGIN IMMEDIATE")
        let batch = SQLiteCommitBatch(sequence: writer.nextSequence, committer: committer)
        writer.nextSequence += 1
        writer.open = batch
        return batch
    }

    /// Fails the open batch when its transaction has ended without a `COMMIT` (SQLite rolls
    /// back on its own after an I/O error or a full disk): its writes are gone, and a write
    /// joining it would run outside any transaction.
    static func settleIfTransactionLost(_ writer: inout Writer, on connection: SQLiteConnection) {
        guard let open = writer.open, !connection.isInTransaction else { return }
        writer.open = nil
        open.settle(lostBatch)
    }

    /// The error of every write in a batch whose transaction SQLite rolled back on its own.
    static let lostBatch = StorageError(.queryFailed, "SQLite rolled back a batch of writes")

    /// Runs one write in its own savepoint of the open batch.
    static func runInSavepoint<Value>(
        _ body: (SQLiteConnection) throws(StorageError) -> Value, batch: SQLiteCommitBatch, writer: inout Writer,
        on connection: SQLiteConnection
    ) throws(StorageError) -> Value {
        do throws(StorageError) {
            try connection.execute("SAVEPOINT batched_write")
            let value: Value
            do throws(StorageError) {
                value = try body(connection)
            } catch {
                guard connection.isInTransaction else { throw error }
                try connection.execute("ROLLBACK TO batched_write")
                try connection.execute("RELEASE batched_write")
                throw error
            }
            try connection.execute("RELEASE batched_write")
            return value
        } catch {
            guard connection.isInTransaction else {
                // SQLite ended the transaction on its own (an I/O error, a full disk, or a body
                // that ended it): the batch's earlier writes are gone with it.
                settleIfTransactionLost(&writer, on: connection)
                throw lostBatch
            }
            throw error
        }
    }

    /// Writes the deferred values into the open transaction and commits it.
    ///
    /// - Returns: nil when committed, else the error (the transaction is rolled back).
    static func commitTransaction(
        deferred: [String: [String: SQLValue]], on connection: SQLiteConnection
    ) -> StorageError? {
        for (sql, values) in deferred {
            for (key, value) in values {
                // Informational: a failure here must not cost the batch its writes.
                let write = SQLDeferredWrite(sql: sql, key: key, value: value)
                _ = try? connection.execute(write.sql, write.bindings)
            }
        }
        do {
            try connection.execute("COMMIT")
            return nil
        } catch {
            if connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
            return error
        }
    }
}
