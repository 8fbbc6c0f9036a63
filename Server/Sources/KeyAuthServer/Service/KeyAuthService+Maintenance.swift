extension KeyAuthService {
    /// Whether the service can answer: its storage runs a trivial query (`/healthz`).
    ///
    /// - Throws: ``StorageError`` when it cannot (503 for the caller).
    func checkHealth() throws(StorageError) {
        try storage.healthCheck()
    }

    /// Forgets what has expired: replay-cache entries, enrollment codes, and pending and denied
    /// devices past their retention.
    func purgeExpired() throws(StorageError) {
        let time = now()
        try storage.purgeExpiredJTIs(now: time)
        try storage.purgeExpiredEnrollmentCodes(now: time)
        try registry.purgeStale()
    }
}
