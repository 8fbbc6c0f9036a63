import KeyAuth
import Synchronization

/// The CA keys a server works with: the one in `--ssh-ca-key-file`, which signs, the one a
/// rotation replaced (``SSHPreviousAuthority``), published with it until retired, and the ones
/// retired (``SSHRetiredAuthorities``), which the revocation list revokes.
///
/// `keyauth-server ssh-ca rotate` and `retire` change the files while servers run; each server
/// reads them again at its periodic cleanup (``reload()``, every `--cleanup-interval`, default a
/// minute), as it publishes rotated token signing keys, so no restart is needed and instances
/// that share the files follow within that interval.
final class SSHCertificateAuthorities: Sendable {
    /// What the files held when last read.
    struct Keys: Sendable {
        /// The CA that signs new certificates.
        var signing: SSHCertificateAuthority
        /// The CA a rotation replaced, if its file is there (published or not).
        var previous: SSHPreviousAuthority?
        /// The CAs retired or replaced before.
        var retired = SSHRetiredAuthorities()

        /// The public keys hosts should trust at `time`: the signing CA's, then the previous one's
        /// during its overlap, unless it was retired (a retired CA is never published again).
        func published(at time: Int64) -> [[UInt8]] {
            var blobs = [signing.publicKeyBlob]
            if let previous, previous.isPublished(at: time), previous.publicKeyBlob != signing.publicKeyBlob,
                !retired.publicKeyBlobs.contains(previous.publicKeyBlob)
            {
                blobs.append(previous.publicKeyBlob)
            }
            return blobs
        }

        /// The public keys of the CAs no longer published at `time`, which the revocation list
        /// revokes: the retired ones, and the previous one once its overlap has ended. Never a
        /// published key, should a file name one.
        func revoked(at time: Int64) -> [[UInt8]] {
            let published = published(at: time)
            var blobs = retired.publicKeyBlobs
            // A crash between writing the retired list and removing the previous file leaves
            // the same CA in both: it is named once.
            if let previous, !previous.isPublished(at: time), !blobs.contains(previous.publicKeyBlob) {
                blobs.append(previous.publicKeyBlob)
            }
            return blobs.filter { !published.contains($0) }
        }

        /// The `TrustedUserCAKeys` lines at `time`, one each, newline-terminated: what
        /// `GET /v1/ssh/ca` answers and `ssh-ca show` prints.
        func lines(at time: Int64) -> String {
            var text = signing.publicKeyLine(comment: "keyauth-ca") + "\n"
            if published(at: time).count > 1, let previous {
                text += previous.publicKeyLine(comment: "keyauth-ca-previous") + "\n"
            }
            return text
        }
    }

    /// The CA key file.
    let keyFile: String
    private let keys: Mutex<Keys>

    /// Reads the key file, and the previous and retired CAs beside it.
    ///
    /// - Throws: `KeyAuthError` as ``SSHCertificateAuthority/load(file:)`` and
    ///   ``SSHPreviousAuthority/load(besides:)`` throw it.
    init(keyFile: String) throws(KeyAuthError) {
        self.keyFile = keyFile
        keys = Mutex(try Self.read(keyFile))
    }

    /// The keys as last read.
    var current: Keys { keys.withLock { $0 } }

    /// Reads the files again, keeping what was read before when they cannot be read now (a file
    /// being replaced, a mistake in its mode): a server keeps issuing rather than stopping.
    ///
    /// - Throws: `KeyAuthError` of the failed read, for the caller to log.
    func reload() throws(KeyAuthError) {
        let fresh = try Self.read(keyFile)
        keys.withLock { $0 = fresh }
    }

    /// The keys the files hold.
    ///
    /// - Throws: `.keyCorrupt` when the key file holds a CA that was retired (an old backup put
    ///   back): signing with it would make certificates that hosts fetching the revocation list
    ///   refuse, while the CA that replaced it went unpublished.
    private static func read(_ keyFile: String) throws(KeyAuthError) -> Keys {
        let keys = Keys(
            signing: try SSHCertificateAuthority.load(file: keyFile),
            previous: try SSHPreviousAuthority.load(besides: keyFile),
            retired: try SSHRetiredAuthorities.load(besides: keyFile))
        if let retired = keys.retired.authorities.first(where: { $0.publicKeyBlob == keys.signing.publicKeyBlob }) {
            throw KeyAuthError(
                .keyCorrupt,
                "--ssh-ca-key-file: \(keyFile) holds the CA retired at \(RFC3339.string(fromSeconds: retired.retiredAt)) "
                    + "(\(SSHRetiredAuthorities.path(besides: keyFile))), which the revocation list revokes: put back "
                    + "the key that replaced it; if that key is lost, ssh-ca rotate makes a new one (hosts that keep "
                    + "the lost CA's line still trust it)")
        }
        return keys
    }
}

extension SSHCertificateAuthorities {
    /// The default `ssh-ca rotate --overlap`: the longest certificate lifetime and a day (more
    /// than the longest cleanup interval, until which servers still sign with the old CA), so
    /// that every certificate the old CA signed has expired before hosts are told to drop it.
    static let defaultOverlap = SSHCertificateIssuer.maximumLifetime + 86_400
    /// The longest `--overlap`.
    static let maximumOverlap: Int64 = 30 * 86_400

    /// `ssh-ca rotate`: a new CA of `type` (by default the current one's) in the key file, and the
    /// current one's public key beside it, published until `now + overlap`.
    ///
    /// An earlier rotation's previous CA, no longer published, is retired first (its key added
    /// to ``SSHRetiredAuthorities``); then the previous CA is written: if the key cannot be
    /// replaced, nothing a host trusts has changed.
    /// - Returns: the new CA and the previous one.
    /// - Throws: `KeyAuthError` `.invalidArgument` while an earlier rotation's previous CA is
    ///   still published (retire it first: a third key would be one hosts never heard of);
    ///   errors of reading the key file; `.storageFailed`.
    static func rotate(
        keyFile: String, to type: SSHCertificateAuthority.KeyType?, overlap: Int64, now: Int64
    ) throws(KeyAuthError) -> (signing: SSHCertificateAuthority, previous: SSHPreviousAuthority) {
        // Refused before the lock file exists: run by another user (root), it would leave files
        // the server cannot read.
        _ = try SSHCertificateAuthority.load(file: keyFile)
        return try SecureFile.withExclusiveLock(lockPath(besides: keyFile)) { () throws(KeyAuthError) in
            try rotateHoldingLock(keyFile: keyFile, to: type, overlap: overlap, now: now)
        }
    }

    /// The file `rotate` and `retire` lock, so that two administrators at once cannot lose a
    /// retired CA (a lost revocation) by each rewriting the list from what they read.
    static func lockPath(besides keyFile: String) -> String { keyFile + ".lock" }

    private static func rotateHoldingLock(
        keyFile: String, to type: SSHCertificateAuthority.KeyType?, overlap: Int64, now: Int64
    ) throws(KeyAuthError) -> (signing: SSHCertificateAuthority, previous: SSHPreviousAuthority) {
        let current = try SSHCertificateAuthority.load(file: keyFile)
        let retired = try SSHRetiredAuthorities.load(besides: keyFile)
        if let earlier = try SSHPreviousAuthority.load(besides: keyFile),
            earlier.publicKeyBlob != current.publicKeyBlob  // a rotation that stopped halfway
        {
            guard !earlier.isPublished(at: now) || retired.publicKeyBlobs.contains(earlier.publicKeyBlob) else {
                throw KeyAuthError(
                    .invalidArgument,
                    "the CA replaced at \(RFC3339.string(fromSeconds: earlier.rotatedAt)) is published until "
                        + "\(RFC3339.string(fromSeconds: earlier.publishedUntil)); run ssh-ca retire first")
            }
            try retired.retire(earlier.publicKeyBlob, at: now, besides: keyFile)
        }
        let next = try SSHCertificateAuthority.generate(type ?? current.keyType)
        // A key file put back from before a retirement holds a retired CA: it is not published again.
        let published = retired.publicKeyBlobs.contains(current.publicKeyBlob) ? 0 : max(overlap, 0)
        let previous = SSHPreviousAuthority(
            replacing: current, rotatedAt: now, publishedUntil: now.addingSaturating(published))
        let previousPath = SSHPreviousAuthority.path(besides: keyFile)
        try previous.write(to: previousPath)
        do {
            try next.replaceKey(at: keyFile)
        } catch {
            try? SecureFile.remove(previousPath)
            throw error
        }
        return (next, previous)
    }

    /// What `ssh-ca retire` did.
    enum Retirement: Equatable {
        /// There was no previous CA.
        case nothingToRetire
        /// The previous CA is retired: no longer published, and revoked.
        case retired(SSHPreviousAuthority)
        /// The previous CA's file named the CA that signs, left by a rotation that stopped
        /// before it replaced the key: the file is gone and nothing was retired.
        case removedLeftover
    }

    /// `ssh-ca retire`: stops publishing the previous CA and revokes it, by adding its key to
    /// the retired CAs at `now` and then removing its file.
    ///
    /// - Throws: errors of reading or writing the files.
    static func retire(keyFile: String, now: Int64) throws(KeyAuthError) -> Retirement {
        _ = try SSHCertificateAuthority.load(file: keyFile)
        return try SecureFile.withExclusiveLock(lockPath(besides: keyFile)) { () throws(KeyAuthError) in
            try retireHoldingLock(keyFile: keyFile, now: now)
        }
    }

    private static func retireHoldingLock(keyFile: String, now: Int64) throws(KeyAuthError) -> Retirement {
        guard let previous = try SSHPreviousAuthority.load(besides: keyFile) else { return .nothingToRetire }
        // The CA that signs is never revoked.
        let isLeftover = previous.publicKeyBlob == (try SSHCertificateAuthority.load(file: keyFile)).publicKeyBlob
        if !isLeftover {
            try SSHRetiredAuthorities.load(besides: keyFile).retire(previous.publicKeyBlob, at: now, besides: keyFile)
        }
        try SecureFile.remove(SSHPreviousAuthority.path(besides: keyFile))
        return isLeftover ? .removedLeftover : .retired(previous)
    }
}
