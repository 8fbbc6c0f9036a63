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
    func installResyncMarker() -> SQLiteCommitBatch? {
        let marker = writer.withLock { writer -> SQLiteCommitBatch? in
            guard !writer.isClosed else { return nil }
            defer { writer.nextSequence += 1 }
            return SQLiteCommitBatch(sequence: writer.nextSequence, committer: identity)
        }
        guard let marker else { return nil }
        marker.markCommitted()
        newestCommitting.withLock { $0 = marker }
        return marker
    }

    /// Syncs on the queue a moment later and settles `marker`: durable, or failed and tried
    /// again under a new marker, until a sync succeeds or fails for good.
    func resync(after marker: SQLiteCommitBatch) {
        queue.asyncAfter(deadline: .now() + Self.resyncDelay) {
            do throws(StorageError) {
                try self.log.sync()
                marker.settle(nil)
            } catch {
                let next = self.log.lostDurability == nil ? self.installResyncMarker() : nil
                marker.settle(error)
                if let next { self.resync(after: next) }
            }
        }
    }

    /// The pause before a sync tried again after one that failed for now: a disk that keeps
    /// failing gets one more sync a second, as the deferred writes' flush gives it.
    static let resyncDelay = DispatchTimeInterval.seconds(1)
}
