import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// What root's part of the helper opened for offline grants: the user's grant store, or why an
/// offline login cannot happen.
struct OfflineAccess {
    let store: OfflineGrantStore?
    /// Why there is no store (offline login off, not root, a store refused).
    let reason: String
    /// Whether the store may log in and be renewed; under `offline=no` it is opened, when a
    /// grant file exists, only to be emptied when the server refuses the device.
    var logsIn = true
}

/// Offline grants in `keyauth-pam-helper` (docs/HOST-LOGIN.md, "Offline"; PROTOCOL.md section
/// 7.2): root's part opens the user's grant file before the uid changes, every online login
/// renews the grant, a server that refuses the device empties it, and a server that cannot be
/// reached leaves the login to the grant and a fresh signature of the device key.
extension PAMHelper {
    /// Opens the user's grant store while still root; without root (a screen locker running as
    /// the user, a test) there is none, and logins are online only.
    ///
    /// With `offline=no` an existing grant file is opened all the same, not to log in: a grant
    /// stored by another service's logins (or before the host turned offline logins off) must
    /// still end when this service's login hears that the server refuses the device, or a
    /// revoked device could come back through it later, offline.
    func openOfflineGrants(
        _ request: PAMHelperRequest, directory: String = OfflineGrantStore.directory
    ) -> OfflineAccess {
        guard request.allowsOffline else {
            let path = directory + "/" + request.user + ".grant"
            // By the effective uid: `su` and polkit's agent helper call PAM, and so start this
            // helper, with the caller's real uid, which cannot see into root's directory.
            let existing =
                geteuid() == 0 && faccessat(AT_FDCWD, path, F_OK, AT_EACCESS) == 0
                ? try? OfflineGrantStore.open(linuxUser: request.user, directory: directory) : nil
            return OfflineAccess(store: existing, reason: "offline login is off (offline=no)", logsIn: false)
        }
        guard geteuid() == 0 else {
            return OfflineAccess(store: nil, reason: "keyauth-pam-helper does not run as root, which keeps the grants")
        }
        do {
            return OfflineAccess(store: try OfflineGrantStore.open(linuxUser: request.user), reason: "")
        } catch {
            return OfflineAccess(store: nil, reason: "offline grants refused: \(error.message)")
        }
    }

    /// The answer to an online login that failed: offline by grant when the server could not be
    /// reached (a transport failure only: a server that answers with a refusal is not offline),
    /// and the grant emptied when the server answered and refused the device.
    func afterFailedLogin(
        _ error: KeyAuthError, offline: OfflineAccess, session: AccountSession, pinReader: HeldPINReader,
        request: PAMHelperRequest
    ) async -> Answer {
        switch error.code {
        case .transportFailed:
            return await offlineLogin(
                after: error, offline: offline, session: session, pinReader: pinReader, request: request)
        default:
            // Revoked, unknown, pending or denied: the device must not go on logging in offline.
            if Self.refusesDevice(error), let store = offline.store,
                Self.refusalEndsGrant(
                    store.stored?.grant, unreadable: store.unreadable != nil,
                    refusedKeyID: try? session.keys.loadPublicKey().fingerprint)
            {
                try? store.clear()
            }
            return Self.answer(for: error)
        }
    }

    /// Whether a refusal of the device key `refusedKeyID` ends the stored grant: only when the
    /// grant is that key's (`cnf.jkt`), or cannot be read at all. Anything running as the user
    /// can make an account with a key the server never saw and run `sudo`; its refusal says
    /// nothing of the key the grant belongs to, which must keep its offline logins.
    ///
    /// The grant's claims are read without checking its signature, only to compare the key: an
    /// offline login checks it in full (``OfflineGrant``).
    static func refusalEndsGrant(_ grant: String?, unreadable: Bool, refusedKeyID: String?) -> Bool {
        if unreadable { return true }
        guard let grant else { return false }
        guard let claims = try? CompactJWS(parsing: grant, algorithms: OfflineGrantFormat.algorithms).claims(),
            let grantKeyID = claims["cnf"]?["jkt"]?.stringValue
        else { return true }
        return grantKeyID == refusedKeyID
    }

    /// Whether the server answered that this device may not log in (`invalid_grant` for a
    /// revoked or unknown device, `access_denied` for a denied one or one the device policy
    /// refuses, `expired_token` or a pending device), as opposed to a failure of the moment (a
    /// 503, a rate limit), which leaves the grant alone.
    static func refusesDevice(_ error: KeyAuthError) -> Bool {
        if error.code == .approvalPending { return true }
        // Only keyauth-server's own body says so: a proxy's 403 page says nothing of the device.
        guard error.code == .serverRejected, let oauth = error.oauthError, oauth.isFromBody else { return false }
        return oauth.refusesDeviceKey || [.accessDenied, .expiredToken].contains(oauth.error)
    }

    /// Logs in with the stored grant: it must verify (``OfflineGrant``), name the device key of
    /// this account, and the key must make a fresh signature, unlocked with the PIN the module
    /// sent (by the TPM for a TPM key), that verifies with the public key the grant names.
    private func offlineLogin(
        after failure: KeyAuthError, offline: OfflineAccess, session: AccountSession, pinReader: HeldPINReader,
        request: PAMHelperRequest
    ) async -> Answer {
        let online = "\(failure.code): \(failure.message)"
        guard offline.logsIn, let store = offline.store else { return .unavailable("\(online); \(offline.reason)") }
        guard let stored = store.stored else {
            return .unavailable("\(online); \(store.unreadable ?? "no offline grant for \(request.user) on this host")")
        }
        let account = session.account
        do throws(KeyAuthError) {
            guard Self.normalizedServer(stored.server) == Self.normalizedServer(request.server) else {
                throw KeyAuthError(.claimInvalid, "the grant is from another server")
            }
            let grant = try OfflineGrant(
                verifying: stored.grant, keySet: try JWKSet(json: stored.keySet.serializedBytes()),
                issuer: account.issuer, host: Self.hostName(), linuxUser: request.user, keyauthUser: account.user,
                now: Int64(Date().timeIntervalSince1970))
            let publicKey = try session.keys.loadPublicKey()
            guard publicKey.fingerprint == grant.deviceKeyID else {
                throw KeyAuthError(.claimInvalid, "the grant is for another device key")
            }
            pinReader.startNewRound()
            let key = try await unlockDeviceKey(session)
            try Self.checkFreshSignature(of: key, with: publicKey)
            return .ok(
                "offline: account \(account.name) key \(grant.deviceKeyID) service \(request.service), "
                    + "grant valid until \(Self.timestamp(grant.expiresAt)) (\(online))")
        } catch {
            return .refused("offline login: \(error.code): \(error.message) (\(online))")
        }
    }

    /// Unlocks the account's key as a login does: the presence check for a key file, the TPM's
    /// own check for a TPM key.
    private func unlockDeviceKey(_ session: AccountSession) async throws(KeyAuthError) -> DeviceKey {
        try await session.authenticator.presence.unlockDeviceKey(
            in: session.keys, reason: "Log in offline to \(Self.hostName()) as \(session.account.user)")
    }

    /// Has `key` sign a fresh token (a random `jti`) and checks it with `publicKey`, the key whose
    /// thumbprint the grant names: a key that is not that one cannot pass.
    static func checkFreshSignature(of key: DeviceKey, with publicKey: RSAPublicKey) throws(KeyAuthError) {
        let token = try JWTBuilder(key: key, audience: "keyauth-pam-helper offline login").sign()
        guard try CompactJWS(parsing: token, algorithms: [.rs256]).isSignatureValid(with: publicKey) else {
            throw KeyAuthError(
                .signatureInvalid, "the device key's signature does not verify with the key of the grant")
        }
    }

    /// Stores the grant of a successful online login with the server's JWK set, fetched now, and
    /// says so in the answer; a login without a store, or whose grant cannot be stored, still
    /// succeeds (the grant is for later logins).
    ///
    /// The module waits ``PAMHelperRequest/answerTimeout`` seconds for the answer once it sent the
    /// PIN (`pinArrivedAt`): the key set's fetch gets what is left of that, less a second, and is
    /// not made at all with less than ``minimumRenewalTime`` left. The login then succeeds with
    /// the grant it had, instead of failing in the module after the server accepted it.
    func renewOfflineGrant(
        _ token: AccessToken, offline: OfflineAccess, session: AccountSession, request: PAMHelperRequest,
        pinArrivedAt: ContinuousClock.Instant?
    ) async -> String {
        guard offline.logsIn, let store = offline.store else { return "" }
        do throws(KeyAuthError) {
            guard let grant = token.offlineGrant else {
                try store.clear()
                return ", the server sent no offline grant"
            }
            let left = Self.timeLeft(answerTimeout: request.answerTimeout, since: pinArrivedAt)
            guard left >= Self.minimumRenewalTime else {
                return ", offline grant not renewed: the module's timeout is near"
            }
            let server = Self.normalizedServer(request.server)
            let document = try await HTTPKeySetFetcher(timeout: min(Self.keySetTimeout, left - 1)).fetch(
                server + "/.well-known/jwks.json")
            guard let keySetJSON = try? JSONValue(parsing: document.body), keySetJSON.objectValue != nil else {
                throw KeyAuthError(.keyCorrupt, "the server's JWK set is not a JSON object")
            }
            // Checked as an offline login will check it, so that a grant stored is one that works.
            let checked = try OfflineGrant(
                verifying: grant, keySet: try JWKSet(json: document.body), issuer: session.account.issuer,
                host: Self.hostName(), linuxUser: request.user, keyauthUser: session.account.user,
                now: Int64(Date().timeIntervalSince1970))
            guard checked.deviceKeyID == (try session.keys.loadPublicKey().fingerprint) else {
                throw KeyAuthError(.claimInvalid, "the server's grant is for another device key")
            }
            try store.save(StoredOfflineGrant(server: server, grant: grant, keySet: keySetJSON))
            return ", offline grant until \(Self.timestamp(checked.expiresAt))"
        } catch {
            return ", offline grant not renewed: \(error.code): \(error.message)"
        }
    }

    /// Seconds the JWK set fetch after an online login may take.
    static let keySetTimeout: TimeInterval = 3
    /// Seconds that must be left before the module's timeout to renew the grant.
    static let minimumRenewalTime: TimeInterval = 2

    /// Seconds left of the module's wait for the answer, which began when the PIN arrived (or,
    /// for a login that asked none, taken as beginning now).
    static func timeLeft(
        answerTimeout: Int, since pinArrivedAt: ContinuousClock.Instant?, now: ContinuousClock.Instant = .now
    ) -> TimeInterval {
        guard let pinArrivedAt else { return TimeInterval(answerTimeout) }
        return TimeInterval(answerTimeout) - (now - pinArrivedAt).inSeconds
    }

    /// The server URL as accounts compare it.
    static func normalizedServer(_ server: String) -> String {
        (try? KeyAuthClient.normalizedServerURL(server, allowInsecureHTTP: true)) ?? server
    }

    /// An ISO 8601 time in UTC, for the journal.
    static func timestamp(_ seconds: Int64) -> String {
        Date(timeIntervalSince1970: TimeInterval(seconds)).ISO8601Format()
    }
}
