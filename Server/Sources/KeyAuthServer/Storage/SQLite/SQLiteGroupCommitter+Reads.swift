/// Reads and the batches they may have seen: a reader sees a batch once it is committed, before
/// its fsync, so a read inside a ``DurabilityScope`` notes the batch it may have seen, and the
/// answer waits for it (`SQLiteGroupCommitter.swift`).
extension SQLiteGroupCommitter {
    /// Runs a read on the write connection, which sees the open batch's changes: for a request
    /// that wrote in a batch not yet committed.
    ///
    /// The scope notes what the writer connection shows: the batch open now, which may be a
    /// later one than the request's own (that one committed before this lock was taken), and the
    /// newest committed one, as a reader's read notes it. A read after which SQLite ended the
    /// transaction (an I/O error) fails the open batch, as a write would: left open, later writes
    /// joined a batch with no transaction, each committed alone before any fsync.
    func read<Value: Sendable>(
        _ body: (SQLiteConnection) throws(StorageError) -> Value
    ) throws(StorageError) -> Value {
        try writer.withLock { (writer: inout Writer) throws(StorageError) -> Value in
            guard !writer.isClosed, let connection = writer.connection else {
                throw StorageError(.closed, "the storage is closed")
            }
            if let open = writer.open { DurabilityScope.current?.require(open) }
            defer { Self.settleIfTransactionLost(&writer, on: connection) }
            let value = try body(connection)
            noteRead()
            return value
        }
    }

    /// Whether the current ``DurabilityScope`` wrote in a batch of this committer that is not yet
    /// committed.
    var scopeHasOpenBatch: Bool {
        DurabilityScope.current?.hasOpenBatch(on: identity) ?? false
    }

    /// Notes in the current ``DurabilityScope`` that a read may have seen the newest committed
    /// batch, when that batch is not yet durable. Call it after the read.
    ///
    /// A batch that failed holds the read only once durability is lost for good
    /// (``SQLiteWALSync/lostDurability``): its `COMMIT` made its data visible, and no later sync
    /// will make it durable. A `COMMIT` that failed rolled back, leaving nothing to see, and a
    /// sync that failed for now leaves the batch to the next one's sync; holding reads on either
    /// answered every read-only request 503 until some other write committed.
    ///
    /// The batch and its outcome are read under one lock: read apart, a batch seen pending could
    /// fail for now and be replaced by its resync marker in between, and the read, finding it
    /// failed, would note neither.
    func noteRead() {
        guard let scope = DurabilityScope.current else { return }
        let holding = newestCommitting.withLock { newest -> SQLiteCommitBatch? in
            guard let batch = newest else { return nil }
            switch batch.outcome {
            case .durable: return nil
            case .failed: return log.lostDurability == nil ? nil : batch
            case .pending: return batch
            }
        }
        if let holding { scope.require(holding) }
    }
}
