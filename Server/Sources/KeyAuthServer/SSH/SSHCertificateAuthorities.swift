import KeyAuth
import Synchronization

/// The CA keys a server works with: the one in `--ssh-ca-key-file`, which signs, and the one a
/// rotation replaced (``SSHPreviousAuthority``), published with it until retired.
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

        /// The public keys hosts should trust at `time`: the signing CA's, then the previous one's
        /// during its overlap.
        func published(at time: Int64) -> [[UInt8]] {
            var blobs = [signing.publicKeyBlob]
            if let previous, previous.isPublished(at: time), previous.publicKeyBlob != signing.publicKeyBlob {
                blobs.append(previous.publicKeyBlob)
            }
            return blobs
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

    /// Reads the key file and the previous CA beside it.
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

    private static func read(_ keyFile: String) throws(KeyAuthError) -> Keys {
        Keys(
            signing: try SSHCertificateAuthority.load(file: keyFile),
            previous: try SSHPreviousAuthority.load(besides: keyFile))
    }
}

extension SSHCertificateAuthorities {
    /// The default `ssh-ca rotate --overlap`: the longest certificate lifetime, so that every
    /// certificate the old CA signed has expired before hosts are told to drop it.
    static let defaultOverlap = SSHCertificateIssuer.maximumLifetime
    /// The longest `--overlap`.
    static let maximumOverlap: Int64 = 30 * 86_400

    /// `ssh-ca rotate`: a new CA of `type` (by default the current one's) in the key file, and the
    /// current one's public key beside it, published until `now + overlap`.
    ///
    /// The previous CA is written first: if the key cannot be replaced, nothing a host trusts
    /// has changed.
    /// - Returns: the new CA and the previous one.
    /// - Throws: `KeyAuthError` `.invalidArgument` while an earlier rotation's previous CA is
    ///   still published (retire it first: a third key would be one hosts never heard of);
    ///   errors of reading the key file; `.storageFailed`.
    static func rotate(
        keyFile: String, to type: SSHCertificateAuthority.KeyType?, overlap: Int64, now: Int64
    ) throws(KeyAuthError) -> (signing: SSHCertificateAuthority, previous: SSHPreviousAuthority) {
        let current = try SSHCertificateAuthority.load(file: keyFile)
        if let earlier = try SSHPreviousAuthority.load(besides: keyFile), earlier.isPublished(at: now) {
            throw KeyAuthError(
                .invalidArgument,
                "the CA replaced at \(RFC3339.string(fromSeconds: earlier.rotatedAt)) is published until "
                    + "\(RFC3339.string(fromSeconds: earlier.publishedUntil)); run ssh-ca retire first")
        }
        let next = try SSHCertificateAuthority.generate(type ?? current.keyType)
        let previous = SSHPreviousAuthority(
            replacing: current, rotatedAt: now, publishedUntil: now.addingSaturating(max(overlap, 0)))
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

    /// `ssh-ca retire`: stops publishing the previous CA by removing its file.
    ///
    /// - Returns: the CA retired, or nil when there was none.
    /// - Throws: errors of reading or removing the file.
    static func retire(keyFile: String) throws(KeyAuthError) -> SSHPreviousAuthority? {
        guard let previous = try SSHPreviousAuthority.load(besides: keyFile) else { return nil }
        try SecureFile.remove(SSHPreviousAuthority.path(besides: keyFile))
        return previous
    }
}
