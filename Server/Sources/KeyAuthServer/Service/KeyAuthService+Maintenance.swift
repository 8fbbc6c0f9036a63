extension KeyAuthService {
    /// Whether the service can answer: its storage runs a trivial query (`/healthz`).
    ///
    /// - Throws: ``StorageError`` when it cannot (503 for the caller).
    func checkHealth() throws(StorageError) {
        try storage.healthCheck()
    }

    /// Forgets what has expired: replay-cache entries, enrollment codes, pending and denied
    /// devices past their retention, sign-in requests past theirs, and ended browser sessions.
    func purgeExpired() throws(StorageError) {
        let time = now()
        try storage.purgeExpiredJTIs(now: time)
        try storage.purgeExpiredEnrollmentCodes(now: time)
        try registry.purgeStale()
        try signIn.purgeExpired()
        try storage.purgeBrowserSessions(now: time)
    }
}
