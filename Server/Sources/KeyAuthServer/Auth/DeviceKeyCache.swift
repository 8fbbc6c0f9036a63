import KeyAuth
import Synchronization

/// Parsed device public keys by `kid`, so that a login does not parse its key's PEM again.
///
/// With OpenSSL 3.0, reading a PEM public key and encoding it back to DER cost more than half
/// of a login's CPU (decoder and encoder lookups under global locks), far more than the RSA
/// verification itself; a parsed key also keeps its pool of verification contexts.
///
/// Only parsing is cached, never a decision: the login still gets the device record for every
/// request (from storage, or from ``LoginDeviceCache``, which a change by any keyauth process
/// retires), so a revocation or a status change applies at once, and an entry is used only when
/// the stored PEM is exactly the one it was parsed from. The cache holds at most `capacity`
/// keys (a few KiB each); past that an arbitrary entry makes room.
final class DeviceKeyCache: Sendable {
    /// A class, so that taking one out of the shared table for a login is one retain.
    private final class Entry: Sendable {
        let pem: String
        let key: RSAPublicKey
        /// ``RSAPublicKey/hasROCAFingerprint``, worked out once per key.
        let hasROCAFingerprint: Bool

        init(pem: String, key: RSAPublicKey) {
            self.pem = pem
            self.key = key
            hasROCAFingerprint = key.hasROCAFingerprint
        }
    }

    private let capacity: Int
    private let entries = Mutex<[String: Entry]>([:])

    init(capacity: Int = 1024) {
        self.capacity = max(capacity, 1)
    }

    /// The key parsed from `pem`, the stored key of device `kid`, and whether it has the ROCA
    /// fingerprint.
    ///
    /// - Throws: what `RSAPublicKey(pemRepresentation:)` throws; failures are not cached.
    func key(kid: String, pem: String) throws(KeyAuthError) -> (key: RSAPublicKey, hasROCAFingerprint: Bool) {
        if let entry = entries.withLock({ $0[kid] }), entry.pem == pem {
            return (entry.key, entry.hasROCAFingerprint)
        }
        let entry = Entry(pem: pem, key: try RSAPublicKey(pemRepresentation: Array(pem.utf8)))
        entries.withLock { entries in
            if entries[kid] == nil, entries.count >= capacity {
                entries.remove(at: entries.startIndex)
            }
            entries[kid] = entry
        }
        return (entry.key, entry.hasROCAFingerprint)
    }

    /// How many keys are cached.
    var count: Int {
        entries.withLock { $0.count }
    }
}
