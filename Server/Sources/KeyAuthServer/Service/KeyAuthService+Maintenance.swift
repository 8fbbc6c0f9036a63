import KeyAuth

extension KeyAuthService {
    /// Whether the service can answer: its storage runs a trivial query (`/healthz`).
    ///
    /// - Throws: ``StorageError`` when it cannot (503 for the caller).
    func checkHealth() throws(StorageError) {
        try storage.healthCheck()
    }

    /// The probe of `/healthz`'s durable write, over this service's storage and clock.
    func makeWriteProbe() -> StorageWriteProbe {
        StorageWriteProbe(storage: storage, now: now)
    }

    /// Forgets what has expired: replay-cache entries, enrollment codes, pending and denied
    /// devices past their retention, deleted devices' keys whose certificates have all expired,
    /// the records of expired SSH certificates, sign-in requests past theirs, and ended browser
    /// sessions;
    /// reloads the signing keys (publishing a rotation's new key) and retires the previous keys
    /// whose last token has expired.
    ///
    /// Replay-cache claims and revocation records are kept ``ClockSkewCheck/purgeMargin`` past
    /// their expiry: another instance whose clock is behind this one's still accepts the tokens
    /// they stop until its own clock reaches that expiry. And the time is the database's, as the
    /// last comparison of the clocks found it (``ClockSkewMonitor/databaseOffset``; this host's
    /// with SQLite): an instance whose clock went more than the margin ahead while it served
    /// deleted claims that instances on time still needed, and a replay went through them.
    ///
    /// - Throws: ``StorageError``; `KeyAuthError` when a stored signing key cannot be read.
    func purgeExpired() throws {
        let time = now().addingSaturating(clockSkew.databaseOffset)
        let skewedHorizon = time.subtractingSaturating(ClockSkewCheck.purgeMargin)
        try replay.forgetsClaims(expiringBefore: skewedHorizon, storage: storage)
        try storage.purgeExpiredJTIs(now: skewedHorizon)
        try storage.purgeExpiredEnrollmentCodes(now: time)
        try storage.purgeSSHRevokedKeys(now: time)
        // Kept as long as the revocation list may name them.
        try storage.purgeSSHCertificates(validUntil: SSHCertificateIssuer.listedAfter(time))
        try registry.purgeStale(now: time)
        try tokens.keys.retireExpired(
            now: time, tokenLifetime: settings.accessTokenLifetime, leeway: DeviceAssertionVerifier.leeway)
        try signIn.purgeExpired(now: time)
        try storage.purgeBrowserSessions(now: time)
        try storage.purgeAuthorizations(now: skewedHorizon)
    }

    /// Reads the database's clock (PostgreSQL) and records how far this host's is from it
    /// (``ClockSkewMonitor``); returns what the log should say when that changed. Nothing with
    /// SQLite, whose servers share the host's clock.
    ///
    /// - Throws: ``StorageError`` when the database cannot be read.
    func checkClock() throws(StorageError) -> ClockSkewMonitor.Change? {
        // The host's clock, not `now`: tests inject clocks of their own.
        guard let database = try storage.databaseTime() else { return nil }
        return clockSkew.record(server: ServerClock.now(), database: database)
    }
}
