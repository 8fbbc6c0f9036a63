import Dispatch

/// Syncing again after a sync that failed for now (`SQLiteGroupCommitter.swift`'s `commit`).
extension SQLiteGroupCommitter {
    /// After a sync that failed for now, the committed batch's data is visible and not durable:
    /// until a sync succeeds, reads must wait rather than answer from it, and an idle server
    /// might have no other batch to sync for a long time. So a marker, a batch with no writes,
    /// becomes what reads note (``noteRead()``), and ``resync(after:)`` settles it.
    ///
    /// The marker goes in before the failed batch (or marker) settles. A read noting the
    /// failed one instead lets its answer go (a failure for now does not hold reads), and its
    /// writer, woken by the settling, could read its own undurable row in that moment.
    ///
    /// While a marker is pending, a later failure puts the same one back rather than a new one:
    /// its sync, still to come on the queue, covers every batch committed before it. A marker
    /// and a timer for each failed batch grew by one every second per failing batch, each
    /// syncing again, on the queue the commits need.
    ///
    /// A batch whose sync failed as the committer closed still gets its marker: reads already
    /// past the storage's closed check would otherwise answer from its rows. Closed, a marker
    /// whose own sync fails ends the resyncs, and its reads get that failure.
    ///
    /// - Parameter finished: the marker whose sync just failed, which is no longer pending.
    /// - Returns: the marker to call ``resync(after:)`` for, when a new one was made.
    func installResyncMarker(replacing finished: SQLiteCommitBatch? = nil) -> SQLiteCommitBatch? {
        let installed = writer.withLock { writer -> (marker: SQLiteCommitBatch, isNew: Bool)? in
            if let finished, writer.resyncMarker === finished { writer.resyncMarker = nil }
            if let pending = writer.resyncMarker { return (pending, false) }
            guard !writer.isClosed || finished == nil else { return nil }
            defer { writer.nextSequence += 1 }
            let marker = SQLiteCommitBatch(sequence: writer.nextSequence, committer: identity)
            writer.resyncMarker = marker
            return (marker, true)
        }
        guard let installed else { return nil }
        installed.marker.markCommitted()
        newestCommitting.withLock { $0 = installed.marker }
        return installed.isNew ? installed.marker : nil
    }

    /// Syncs on the queue a moment later and settles `marker`: durable, or failed and tried
    /// again under a new marker, until a sync succeeds or fails for good.
    func resync(after marker: SQLiteCommitBatch) {
        queue.asyncAfter(deadline: .now() + Self.resyncDelay) {
            guard case .pending = marker.outcome else { return }
            do throws(StorageError) {
                try self.log.sync()
                self.settleResyncMarker()
            } catch {
                let next = self.log.lostDurability == nil ? self.installResyncMarker(replacing: marker) : nil
                marker.settle(error)
                if let next { self.resync(after: next) }
            }
        }
    }

    /// Settles the pending marker as durable, after a sync that succeeded: it covers every batch
    /// committed before it, and so the batches the marker stood for. On the queue only.
    func settleResyncMarker() {
        let marker = writer.withLock { writer -> SQLiteCommitBatch? in
            defer { writer.resyncMarker = nil }
            return writer.resyncMarker
        }
        marker?.settle(nil)
    }

    /// The pause before a sync tried again after one that failed for now: a disk that keeps
    /// failing gets one more sync a second, as the deferred writes' flush gives it.
    static let resyncDelay = DispatchTimeInterval.seconds(1)
}
