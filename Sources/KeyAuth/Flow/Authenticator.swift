import Foundation
import Synchronization

/// Logs a user in with a device key: TouchIDAuth's flow, done right.
///
/// 1. Check that the user is present (PIN, PAM, or explicitly nothing).
/// 2. If there is no key: generate one, register its public key with a proof of possession, and
///    if the server refuses it delete the new key, so the next attempt registers again
///    (TouchIDAuth kept it and then logged in with a key the server never had). When the answer
///    is lost instead, the key stays, as the server may hold it: register it again with
///    ``Configuration-swift.struct/registerStoredKey``.
/// 3. Sign a short-lived assertion and authenticate with it; while the server says the device
///    awaits approval, poll no faster than ``Configuration-swift.struct/pollInterval``.
///
/// The presence check opens the key (``PresenceCheck/unlock(reason:_:)`` for a key file,
/// ``PresenceCheck/unlockHardwareKey(reason:_:)`` for a TPM key) and gives a new key its secret
/// (``PresenceCheck/secretForNewKey(reason:minimumLength:confirm:)``): with ``PINPresence`` the
/// PIN is the key file's passphrase, or the TPM key's authorization value, so the check and the
/// key are bound either way.
///
/// The store decides where a new key goes (``KeyStore``): a key file, or a TPM, whose key never
/// leaves it. Each assertion is signed once, through ``DeviceKey``; with a TPM key that is one
/// TPM signature per login (a registration signs twice: the proof of possession, then the login).
public final class Authenticator<Session: Sendable>: Sendable {
    /// Settings of the flow.
    public struct Configuration: Sendable {
        /// The `aud` of assertions: the server's issuer URL.
        public var audience: String?
        /// Size of a new key; nil for the store's default (3072 for a key file; for a TPM key
        /// 3072 where the TPM supports it, else 2048).
        public var keyBits: Int?
        /// The reason shown by the presence prompt (TouchIDAuth's prompt text).
        public var reason: String = "Log in with your device key"
        /// Whether to wait for approval when registration is pending (false: fail with
        /// `.approvalPending` at once).
        public var waitForApproval: Bool = true
        /// Seconds between polls while pending (RFC 8628: at least 5).
        public var pollInterval: Duration = .seconds(5)
        /// Whether a new PIN is asked twice.
        public var confirmNewPIN: Bool = true
        /// The clock that dates assertions.
        public var clock: KeyAuthClock = .system
        /// A key already unlocked elsewhere (``AgentSigner``, `keyauth agent`), asked before the
        /// presence check with the stored public key; nil from it means "ask as usual", and an
        /// error (an agent that is not the user's own) ends the login.
        public var heldKey: (@Sendable (RSAPublicKey) throws(KeyAuthError) -> DeviceKey?)?
        /// Whether a key already in the store is registered again before it logs in.
        ///
        /// For a registration whose answer never arrived (the connection dropped, a timeout, a
        /// 5xx): the key was kept because the server may hold it, and the server answers a
        /// registration of a key it holds for the same user with that key's current record, so
        /// sending it again finishes the registration either way.
        public var registerStoredKey = false

        public init(audience: String?, keyBits: Int? = nil, reason: String = "Log in with your device key") {
            self.audience = audience
            self.keyBits = keyBits
            self.reason = reason
        }
    }

    private struct Observers {
        var state: AuthenticatorState = .idle
        var continuations: [UUID: AsyncStream<AuthenticatorState>.Continuation] = [:]
    }

    /// Where the key lives.
    public let store: KeyPairStore
    /// How presence is checked.
    public let presence: any PresenceCheck
    /// The flow's settings.
    public let configuration: Configuration
    private let hooks: AuthenticatorHooks<Session>
    private let observers = Mutex(Observers())

    public init(
        store: KeyPairStore, presence: any PresenceCheck, configuration: Configuration,
        hooks: AuthenticatorHooks<Session>
    ) {
        self.store = store
        self.presence = presence
        self.configuration = configuration
        self.hooks = hooks
    }

    /// The current state.
    public var state: AuthenticatorState { observers.withLock { $0.state } }

    /// A stream of state changes, starting with the current state; ends when the caller stops
    /// iterating.
    public func stateUpdates() -> AsyncStream<AuthenticatorState> {
        let (stream, continuation) = AsyncStream<AuthenticatorState>.makeStream(bufferingPolicy: .unbounded)
        let id = UUID()
        // Yielded under the lock, as transitions are: a transition between registering and
        // yielding would otherwise reach the stream before the older state, which the observer
        // would then take for the current one. The stream is unbounded, so yielding never blocks.
        observers.withLock { observers in
            observers.continuations[id] = continuation
            continuation.yield(observers.state)
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.observers.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Sets the state and tells every observer, under the lock, so that two transitions reach
    /// every stream in the order they were made.
    private func transition(to state: AuthenticatorState) {
        observers.withLock { observers in
            observers.state = state
            for continuation in observers.continuations.values { continuation.yield(state) }
        }
    }

    /// Runs the whole flow and returns the session from the `authenticate` hook.
    ///
    /// - Throws: ``KeyAuthError``; a hook's error that is not one comes as `.hookFailed` with the
    ///   hook's error as ``KeyAuthError/underlying``; the `onError` hook sees the same error
    ///   first.
    public func login() async throws(KeyAuthError) -> Session {
        do {
            let session = try await runFlow()
            transition(to: .authenticated)
            return session
        } catch {
            transition(to: .failed(error.code))
            hooks.onError(error)
            throw error
        }
    }

    /// The callback form of ``login()``, for code that is not `async`.
    public func start(completion: @escaping @Sendable (Result<Session, KeyAuthError>) -> Void) {
        Task {
            do throws(KeyAuthError) {
                completion(.success(try await login()))
            } catch {
                completion(.failure(error))
            }
        }
    }

    /// Revokes the key through the `revoke` hook, then deletes it locally.
    ///
    /// - Parameter force: delete the key even when revocation fails (the server is gone), or when
    ///   its public key cannot be read to ask for it (a file left too open, a corrupt one).
    /// - Throws: without `force`, the `revoke` hook's error, or the error reading the public key:
    ///   deleted without revocation, the device would stay active on the server, and nothing
    ///   here could revoke it any more.
    public func reset(force: Bool = false) async throws(KeyAuthError) {
        if let revoke = hooks.revoke, store.hasKey {
            do {
                try await revoke(try store.loadPublicKey())
            } catch {
                if !force { throw Self.wrap(error, hook: "revoke") }
            }
        }
        try store.reset()
        transition(to: .idle)
    }

    private func runFlow() async throws(KeyAuthError) -> Session {
        transition(to: .checkingPresence)
        var key: DeviceKey
        // Whether the presence check opened the key in this run (not the agent, not a new key):
        // a TPM refuses a wrong PIN only at the first signature, and the check may ask again.
        var openedWithPresence = false
        // Wrong PINs the TPM refused in this run, whether at the registration or the login.
        var refusals = 0
        if store.hasKey {
            (key, openedWithPresence) = try await loadKey()
            // A key made by an earlier run stays whatever the answer: that run's registration
            // may have been stored, and a refusal now (a rate limit, say) does not undo it.
            // Its registration signs first, so that is where a TPM refuses a wrong PIN.
            while configuration.registerStoredKey {
                do {
                    try await register(key, forgettingRefusedKey: false)
                    break
                } catch {
                    try await reopen(&key, after: error, openedWithPresence: openedWithPresence, refusals: &refusals)
                }
            }
        } else {
            key = try await createAndRegisterKey()
        }
        while true {
            transition(to: .signing)
            let assertion: String
            do {
                assertion = try await sign(with: key)
            } catch {
                try await reopen(&key, after: error, openedWithPresence: openedWithPresence, refusals: &refusals)
                continue
            }
            transition(to: .authenticating)
            do {
                if let authenticateWithProofs = hooks.authenticateWithProofs {
                    let proofs = DPoPProofBuilder(
                        signer: key, publicKey: key.publicKey.jwk, clock: configuration.clock)
                    return try await authenticateWithProofs(assertion, proofs)
                }
                return try await hooks.authenticate(assertion)
            } catch {
                let wrapped = Self.wrap(error, hook: "authenticate")
                guard wrapped.code == .approvalPending, configuration.waitForApproval else { throw wrapped }
                transition(to: .awaitingApproval(keyID: key.publicKey.fingerprint))
                do {
                    try await Task.sleep(for: configuration.pollInterval)
                } catch {
                    throw KeyAuthError(.cancelled, "stopped waiting for approval")
                }
            }
        }
    }

    /// Opens `key` again with the presence check after the TPM refused its PIN at a signature,
    /// or rethrows `error`: only a key this run opened with the presence check is asked for
    /// again, and only as often as ``PresenceCheck/asksAgain(afterHardwareRefusal:refusals:)``
    /// allows.
    private func reopen(
        _ key: inout DeviceKey, after error: KeyAuthError, openedWithPresence: Bool, refusals: inout Int
    ) async throws(KeyAuthError) {
        refusals += 1
        guard key.kind == .tpm, openedWithPresence,
            presence.asksAgain(afterHardwareRefusal: error, refusals: refusals)
        else { throw error }
        transition(to: .checkingPresence)
        // The presence check again, not a key holder that may have appeared since.
        key = try await presence.unlockDeviceKey(in: store, reason: configuration.reason, after: error)
    }

    /// The stored key: the one a holder such as `keyauth agent` lends, or the one the presence
    /// check opens (`unlockedByPresence`).
    private func loadKey() async throws(KeyAuthError) -> (key: DeviceKey, unlockedByPresence: Bool) {
        let store = self.store
        if let heldKey = configuration.heldKey, let publicKey = try? store.loadPublicKey(),
            let key = try heldKey(publicKey)
        {
            return (key, false)
        }
        return (try await presence.unlockDeviceKey(in: store, reason: configuration.reason), true)
    }

    /// Asks for the new key's secret and makes the key; the secret goes out of scope here, and
    /// only a TPM key, which needs it for every signature, keeps it.
    private func createKey() async throws(KeyAuthError) -> DeviceKey {
        // Decided before the PIN is asked: its rules depend on where the key will live.
        let store = self.store.resolvingAutomatic()
        let pin = try await presence.secretForNewKey(
            reason: configuration.reason, minimumLength: store.newKeyKind.minimumPINLength,
            maximumBytes: store.newKeyKind.maximumPINBytes, confirm: configuration.confirmNewPIN)
        transition(to: .generatingKey)
        let bits = configuration.keyBits
        return try await Self.offCooperativePool { () throws(KeyAuthError) in try store.createKey(bits: bits, pin: pin)
        }
    }

    private func createAndRegisterKey() async throws(KeyAuthError) -> DeviceKey {
        let key = try await createKey()
        try await register(key, forgettingRefusedKey: true)
        return key
    }

    /// Registers `key` with the server, and forgets a key made in this run when the server
    /// refused it.
    ///
    /// Only a refusal (a 4xx answer with an OAuth error body) shows that the server does not hold
    /// the key. When no answer came (a connection lost after sending, a timeout) or the answer
    /// was a 5xx or unreadable, the server may have stored the device, and with an enrollment
    /// code used it up: the key stays, so that registering the same key again
    /// (``Configuration-swift.struct/registerStoredKey``) finishes the registration. A key sent
    /// again is never forgotten here: a refusal of this request says nothing about the earlier
    /// one, which the server may hold.
    private func register(_ key: DeviceKey, forgettingRefusedKey: Bool) async throws(KeyAuthError) {
        transition(to: .registering)
        do {
            let status: RegistrationStatus
            if let registerDeviceKey = hooks.registerDeviceKey {
                // A registration of several requests signs a fresh proof for each: the TPM's
                // attestation between them can outlast a proof's 30 seconds on a busy machine.
                status = try await registerDeviceKey(key) { () throws(KeyAuthError) in try await self.sign(with: key) }
            } else {
                status = try await hooks.registerPublicKey(key.publicKey, try await sign(with: key))
            }
            if status == .pending {
                transition(to: .awaitingApproval(keyID: key.publicKey.fingerprint))
                guard configuration.waitForApproval else {
                    throw KeyAuthError(
                        .approvalPending,
                        "the device is registered as \(key.publicKey.fingerprint) and waits for approval by "
                            + "another device of the user")
                }
            }
        } catch {
            let wrapped = Self.wrap(error, hook: "registerPublicKey")
            if forgettingRefusedKey, wrapped.code != .approvalPending, Self.isRefusal(wrapped) {
                // The server does not hold this key: forget it, so the next attempt registers again.
                try? store.reset()
            }
            throw wrapped
        }
    }

    /// Whether `error` is the server's refusal: an HTTP answer in the 4xx range with an OAuth
    /// error body. Nothing else shows that the server did not store what was sent.
    static func isRefusal(_ error: KeyAuthError) -> Bool {
        guard let oauth = error.oauthError, oauth.isFromBody else { return false }
        return (400...499).contains(oauth.statusCode)
    }

    private func sign(with key: DeviceKey) async throws(KeyAuthError) -> String {
        let extra: JWTClaims
        do {
            extra = try await hooks.jwtPayload()
        } catch {
            throw Self.wrap(error, hook: "jwtPayload")
        }
        let builder = JWTBuilder(key: key, audience: configuration.audience, clock: configuration.clock)
        guard key.kind == .tpm else { return try builder.sign(claims: extra) }
        // A hardware TPM takes tens to hundreds of milliseconds per signature: not on the pool.
        return try await Self.offCooperativePool { () throws(KeyAuthError) in try builder.sign(claims: extra) }
    }

    /// Runs CPU-heavy or blocking work (key generation, in memory or in a TPM) on a plain thread,
    /// not the cooperative pool (``BlockingWork``).
    private static func offCooperativePool<Value: Sendable>(
        _ work: @escaping @Sendable () throws(KeyAuthError) -> Value
    ) async throws(KeyAuthError) -> Value {
        try await BlockingWork.run(work)
    }

    /// A hook's error as the library's: a ``KeyAuthError`` as it is, a cancellation as
    /// `.cancelled`, anything else as `.hookFailed` with the app's error kept underneath, where
    /// the app can inspect it (its own network failure is not a server's refusal).
    static func wrap(_ error: any Error, hook: String) -> KeyAuthError {
        if let error = error as? KeyAuthError { return error }
        if error is CancellationError { return KeyAuthError(.cancelled, "cancelled") }
        return KeyAuthError(.hookFailed, "the \(hook) hook failed: \(error)", underlying: error)
    }
}
