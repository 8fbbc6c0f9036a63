import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// Records what the hooks saw; stands in for a server in these unit tests (the command's
/// end-to-end tests run the same flow against the real keyauth-server).
final class HookRecorder: Sendable {
    struct Calls {
        var registered: [RSAPublicKey] = []
        var proofs: [String] = []
        var assertions: [String] = []
        var errors: [KeyAuthError.Code] = []
        var revoked: [RSAPublicKey] = []
        var pendingAnswers = 0
    }
    let calls = Mutex(Calls())
    let registration: RegistrationStatus
    /// What every registration throws; nil to accept it.
    let registrationFailure: KeyAuthError?

    init(registration: RegistrationStatus = .active, registrationFailure: KeyAuthError? = nil, pendingAnswers: Int = 0)
    {
        self.registration = registration
        self.registrationFailure = registrationFailure
        calls.withLock { $0.pendingAnswers = pendingAnswers }
    }

    var hooks: AuthenticatorHooks<String> {
        AuthenticatorHooks(
            registerPublicKey: { key, proof in
                self.calls.withLock {
                    $0.registered.append(key)
                    $0.proofs.append(proof)
                }
                if let failure = self.registrationFailure { throw failure }
                return self.registration
            },
            jwtPayload: {
                var claims = JWTClaims()
                claims.set("device_name", string: "test-box")
                return claims
            },
            authenticate: { assertion in
                let pending = self.calls.withLock { calls -> Bool in
                    calls.assertions.append(assertion)
                    guard calls.pendingAnswers > 0 else { return false }
                    calls.pendingAnswers -= 1
                    return true
                }
                if pending { throw KeyAuthError(.approvalPending, "authorization_pending") }
                return "session-token"
            },
            onError: { error in self.calls.withLock { $0.errors.append(error.code) } },
            revoke: { key in self.calls.withLock { $0.revoked.append(key) } })
    }
}

@Suite("Authenticator flow", .timeLimit(.minutes(10)))
struct AuthenticatorTests {
    private func authenticator(
        _ recorder: HookRecorder, directory: String, presence: (any PresenceCheck)? = nil, wait: Bool = true,
        keyStore: KeyStore = .file
    ) -> Authenticator<String> {
        var configuration = Authenticator<String>.Configuration(audience: "https://auth.example.test", keyBits: 2048)
        configuration.pollInterval = .milliseconds(10)
        configuration.waitForApproval = wait
        return Authenticator(
            store: KeyPairStore(directory: directory, keyStore: keyStore), presence: presence ?? NoPresence(),
            configuration: configuration, hooks: recorder.hooks)
    }

    @Test("first login generates a key, registers it with a valid proof, then authenticates")
    func firstLogin() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        let flow = authenticator(recorder, directory: temporary.path)
        let updates = flow.stateUpdates()
        let session = try await flow.login()
        #expect(session == "session-token")
        let calls = recorder.calls.withLock { $0 }
        let registered = try #require(calls.registered.first)
        #expect(registered.bits == 2048)
        let verifier = DeviceAssertionVerifier(audience: "https://auth.example.test")
        let proof = try verifier.verify(verifier.parse(try #require(calls.proofs.first)), key: registered)
        #expect(proof.subject == registered.fingerprint)
        let login = try verifier.verify(verifier.parse(try #require(calls.assertions.first)), key: registered)
        #expect(try login.claims.string("device_name") == "test-box")
        #expect(try KeyPairStore(directory: temporary.path).loadPublicKey() == registered)
        var states: [AuthenticatorState] = []
        for await state in updates {
            states.append(state)
            if state == .authenticated { break }
        }
        #expect(
            states == [
                .idle, .checkingPresence, .generatingKey, .registering, .signing, .authenticating, .authenticated,
            ])
    }

    @Test("a second login reuses the key and does not register again")
    func secondLogin() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        _ = try await authenticator(recorder, directory: temporary.path).login()
        _ = try await authenticator(recorder, directory: temporary.path).login()
        let calls = recorder.calls.withLock { $0 }
        #expect(calls.registered.count == 1)
        #expect(calls.assertions.count == 2)
    }

    @Test("a registration the server refused deletes the new key so that the next attempt registers again")
    func refusedRegistration() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let refusal = KeyAuthError(
            .serverRejected, "refused",
            underlying: OAuthError(error: .accessDenied, errorDescription: nil, statusCode: 403))
        let failing = HookRecorder(registrationFailure: refusal)
        let flow = authenticator(failing, directory: temporary.path)
        await #expect {
            try await flow.login()
        } throws: { ($0 as? KeyAuthError)?.code == .serverRejected }
        #expect(flow.state == .failed(.serverRejected))
        #expect(failing.calls.withLock { $0.errors } == [.serverRejected])
        #expect(!KeyPairStore(directory: temporary.path).hasKey)
        let working = HookRecorder()
        _ = try await authenticator(working, directory: temporary.path).login()
        #expect(working.calls.withLock { $0.registered.count } == 1)
    }

    @Test(
        "a registration whose answer was lost keeps the key, and registerStoredKey sends the same key again",
        arguments: [
            KeyAuthError(.transportFailed, "the server closed the connection without an answer"),
            KeyAuthError(
                .serverRejected, "server error",
                underlying: OAuthError(error: .serverError, errorDescription: nil, statusCode: 502, isFromBody: false)),
            KeyAuthError(
                .serverRejected, "HTML 403",
                underlying: OAuthError(error: .accessDenied, errorDescription: nil, statusCode: 403, isFromBody: false)),
        ])
    func lostRegistrationAnswer(_ failure: KeyAuthError) async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let failing = HookRecorder(registrationFailure: failure)
        await #expect {
            try await authenticator(failing, directory: temporary.path).login()
        } throws: { ($0 as? KeyAuthError)?.code == failure.code }
        let store = KeyPairStore(directory: temporary.path)
        #expect(store.hasKey)
        let sent = try #require(failing.calls.withLock { $0.registered.first })
        let working = HookRecorder()
        var configuration = Authenticator<String>.Configuration(audience: "https://auth.example.test", keyBits: 2048)
        configuration.registerStoredKey = true
        let again = Authenticator(
            store: store, presence: NoPresence(), configuration: configuration, hooks: working.hooks)
        #expect(try await again.login() == "session-token")
        #expect(working.calls.withLock { $0.registered } == [sent])
    }

    @Test("a pending registration polls until approved")
    func pendingThenApproved() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder(registration: .pending, pendingAnswers: 2)
        let flow = authenticator(recorder, directory: temporary.path)
        let session = try await flow.login()
        #expect(session == "session-token")
        #expect(recorder.calls.withLock { $0.assertions.count } == 3)
    }

    @Test("with waiting off, a pending registration keeps the key and reports approval pending")
    func pendingNoWait() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder(registration: .pending)
        await #expect {
            try await authenticator(recorder, directory: temporary.path, wait: false).login()
        } throws: { ($0 as? KeyAuthError)?.code == .approvalPending }
        #expect(KeyPairStore(directory: temporary.path).hasKey)
    }

    @Test("waiting for approval can be cancelled")
    func cancelWaiting() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder(registration: .pending, pendingAnswers: 1_000_000)
        let flow = authenticator(recorder, directory: temporary.path)
        let task = Task { try await flow.login() }
        try await Task.sleep(for: .milliseconds(300))
        task.cancel()
        await #expect {
            try await task.value
        } throws: { ($0 as? KeyAuthError)?.code == .cancelled }
    }

    @Test("with a PIN, the new key is encrypted with it and a wrong PIN fails the next login")
    func pinBinding() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        let attempts = temporary.path + "/pin-attempts"
        let registering = PINPresence(reader: FixedSecretReader(answers: ["432109", "432109"]), attemptsFile: attempts)
        _ = try await authenticator(recorder, directory: temporary.path, presence: registering).login()
        #expect(try KeyPairStore(directory: temporary.path).isEncrypted())
        let right = PINPresence(reader: FixedSecretReader(answers: ["432109"]), attemptsFile: attempts)
        #expect(
            try await authenticator(recorder, directory: temporary.path, presence: right).login() == "session-token")
        let wrong = PINPresence(reader: FixedSecretReader(answers: ["999999"]), attemptsFile: attempts)
        await #expect {
            try await authenticator(recorder, directory: temporary.path, presence: wrong).login()
        } throws: { ($0 as? KeyAuthError)?.code == .wrongPIN }
        #expect(recorder.calls.withLock { $0.assertions.count } == 2)
    }

    @Test("a new PIN shorter than six characters registers nothing and leaves no key")
    func shortPINRefused() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        let presence = PINPresence(
            reader: FixedSecretReader(answers: ["4711", "4711"]), attemptsFile: temporary.path + "/pin-attempts")
        await #expect {
            try await authenticator(recorder, directory: temporary.path, presence: presence).login()
        } throws: { ($0 as? KeyAuthError)?.code == .invalidArgument }
        #expect(!KeyPairStore(directory: temporary.path).hasKey)
        #expect(recorder.calls.withLock { $0.registered.isEmpty && $0.assertions.isEmpty })
    }

    @Test("reset revokes through the hook first, then deletes the key")
    func reset() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        let flow = authenticator(recorder, directory: temporary.path)
        _ = try await flow.login()
        let key = try KeyPairStore(directory: temporary.path).loadPublicKey()
        try await flow.reset()
        #expect(recorder.calls.withLock { $0.revoked } == [key])
        #expect(!KeyPairStore(directory: temporary.path).hasKey)
    }

    @Test("reset keeps a key whose public half cannot be read to revoke it, unless forced")
    func resetNeedsThePublicKey() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        let flow = authenticator(recorder, directory: temporary.path)
        _ = try await flow.login()
        let store = KeyPairStore(directory: temporary.path)
        // Left readable by others: refused as unprotected, so nothing can be revoked with it.
        try #require(chmod(store.publicKeyPath, 0o644) == 0)
        await #expect(throws: KeyAuthError.self) { try await flow.reset() }
        #expect(store.hasKey, "deleted unrevoked, the device would stay active on the server")
        #expect(recorder.calls.withLock { $0.revoked }.isEmpty)
        try await flow.reset(force: true)
        #expect(!store.hasKey)
    }

    @Test("the callback API delivers the same result as the async one")
    func callbackAPI() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let flow = authenticator(HookRecorder(), directory: temporary.path)
        let result = await withCheckedContinuation { continuation in
            flow.start { continuation.resume(returning: $0) }
        }
        #expect(try result.get() == "session-token")
    }

    @Test("a presence check that holds the key's secret unlocks the key itself, with no downcast in the flow")
    func presenceThatUnlocks() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let vault = VaultPresence()
        let recorder = HookRecorder()
        _ = try await authenticator(recorder, directory: temporary.path, presence: vault).login()
        // The new key is protected by the check's own secret, not left in the clear.
        #expect(try KeyPairStore(directory: temporary.path).isEncrypted())
        #expect(vault.calls == ["secretForNewKey(minimum 6, confirm true)"])
        #expect(
            try await authenticator(recorder, directory: temporary.path, presence: vault).login() == "session-token")
        #expect(vault.calls == ["secretForNewKey(minimum 6, confirm true)", "unlock"])
    }

    @Test("with a TPM, the key is made in it with a secret of at least 4, opened without the check's count, and signs")
    func tpmKey() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let vault = VaultPresence()
        let recorder = HookRecorder()
        let keyStore = KeyStore.automatic(try tpm.connection)
        _ = try await authenticator(recorder, directory: temporary.path, presence: vault, keyStore: keyStore).login()
        #expect(vault.calls == ["secretForNewKey(minimum 4, confirm true)"])
        let store = KeyPairStore(directory: temporary.path)
        #expect(store.storedKind == .tpm)
        #expect(try store.loadTPMKey().key.requiresPIN)
        _ = try await authenticator(recorder, directory: temporary.path, presence: vault, keyStore: keyStore).login()
        #expect(vault.calls == ["secretForNewKey(minimum 4, confirm true)", "unlockHardwareKey"])

        // One proof and one assertion per login, each signed by the TPM key that was registered.
        let calls = recorder.calls.withLock { $0 }
        let registered = try #require(calls.registered.first)
        #expect(registered == (try store.loadPublicKey()))
        #expect(calls.proofs.count == 1)
        #expect(calls.assertions.count == 2)
        for token in calls.proofs + calls.assertions {
            // Checked at the moment it was signed: a loaded machine may take longer than a
            // token's lifetime to get here, and expiry is not what this test is about.
            let issuedAt = try #require(try CompactJWS(parsing: token).claims()["iat"]?.integerValue)
            let verifier = DeviceAssertionVerifier(
                audience: "https://auth.example.test", clock: .fixed(seconds: issuedAt))
            #expect(try verifier.verify(verifier.parse(token), key: registered).subject == registered.fingerprint)
        }
    }

    @Test("with a PIN and a TPM key, a wrong PIN fails at signing with the TPM's count, and no attempts file")
    func tpmKeyWrongPIN() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder()
        let attempts = temporary.path + "/pin-attempts"
        let keyStore = KeyStore.tpm(try tpm.connection)
        let registering = PINPresence(reader: FixedSecretReader(answers: ["2468", "2468"]), attemptsFile: attempts)
        _ = try await authenticator(recorder, directory: temporary.path, presence: registering, keyStore: keyStore)
            .login()
        let wrong = PINPresence(reader: FixedSecretReader(answers: ["1357"]), attemptsFile: attempts)
        let error = await #expect(throws: KeyAuthError.self) {
            try await authenticator(recorder, directory: temporary.path, presence: wrong, keyStore: keyStore).login()
        }
        #expect(error?.code == .wrongPIN)
        #expect(error?.message == "wrong PIN; the TPM locks out after 2 more wrong PINs")
        #expect(try tpm.connection.info().lockoutCounter == 1)
        #expect(!FileManager.default.fileExists(atPath: attempts))
        #expect(recorder.calls.withLock { $0.assertions.count } == 1, "the refused signature sent nothing")

        let right = PINPresence(reader: FixedSecretReader(answers: ["2468"]), attemptsFile: attempts)
        #expect(
            try await authenticator(recorder, directory: temporary.path, presence: right, keyStore: keyStore).login()
                == "session-token")
        #expect(!FileManager.default.fileExists(atPath: attempts))
    }

    @Test("a resumed registration of a TPM key asks again for a PIN the TPM refused, as a login does")
    func tpmKeyWrongPINOnResumedRegistration() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let attempts = temporary.path + "/pin-attempts"
        let keyStore = KeyStore.tpm(try tpm.connection)
        let lost = HookRecorder(registrationFailure: KeyAuthError(.transportFailed, "no answer"))
        let making = PINPresence(reader: FixedSecretReader(answers: ["2468", "2468"]), attemptsFile: attempts)
        await #expect {
            try await authenticator(lost, directory: temporary.path, presence: making, keyStore: keyStore).login()
        } throws: { ($0 as? KeyAuthError)?.code == .transportFailed }
        let sent = try #require(lost.calls.withLock { $0.registered.first })

        // The registration's signature is the TPM's first use of the PIN: a wrong one there was
        // the command's end (exit 77) where a login asks again.
        let working = HookRecorder()
        let reader = FixedSecretReader(answers: ["1357", "2468"])
        var configuration = Authenticator<String>.Configuration(audience: "https://auth.example.test", keyBits: 2048)
        configuration.registerStoredKey = true
        let resumed = Authenticator(
            store: KeyPairStore(directory: temporary.path, keyStore: keyStore),
            presence: PINPresence(reader: reader, attemptsFile: attempts), configuration: configuration,
            hooks: working.hooks)
        #expect(try await resumed.login() == "session-token")
        #expect(reader.requests.count == 2)
        #expect(reader.messages.contains("wrong PIN; the TPM locks out after 2 more wrong PINs"), "\(reader.messages)")
        #expect(try tpm.connection.info().lockoutCounter == 1)
        #expect(working.calls.withLock { $0.registered } == [sent])
    }

    @Test("a hook's own error is kept underneath as hookFailed, not reported as a server refusal")
    func hookErrorKept() async throws {
        struct NetworkDown: Error, Equatable {}
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let hooks = AuthenticatorHooks<String>(
            registerPublicKey: { _, _ in .active }, authenticate: { _ in throw NetworkDown() })
        let flow = Authenticator(
            store: KeyPairStore(directory: temporary.path), presence: NoPresence(),
            configuration: .init(audience: "https://auth.example.test", keyBits: 2048), hooks: hooks)
        let error = await #expect(throws: KeyAuthError.self) { try await flow.login() }
        #expect(error?.code == .hookFailed)
        #expect(error?.underlying as? NetworkDown == NetworkDown())
        #expect(error?.message.contains("authenticate") == true)
    }

    @Test("a pending registration's error names no command of the keyauth tool")
    func pendingMessageIsAppNeutral() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let recorder = HookRecorder(registration: .pending)
        let error = await #expect(throws: KeyAuthError.self) {
            try await authenticator(recorder, directory: temporary.path, wait: false).login()
        }
        #expect(error?.code == .approvalPending)
        #expect(error?.message.contains("keyauth") == false)
        #expect(
            error?.message.contains(try KeyPairStore(directory: temporary.path).loadPublicKey().fingerprint) == true)
    }
}

/// A presence check with a secret of its own, as a TPM key store has: it protects new keys with
/// the secret and opens them with it, and records what the flow asked.
private final class VaultPresence: PresenceCheck, @unchecked Sendable {
    private let lock = NSLock()
    private var recorded: [String] = []
    private let secret = "vault-secret-0451"

    var calls: [String] { lock.withLock { recorded } }
    var kind: PresenceKind { .none }
    func isAvailable() -> Bool { true }

    func verifyPresence(reason: String) async throws(KeyAuthError) {
        lock.withLock { recorded.append("verifyPresence") }
    }

    func unlock<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key) async throws(KeyAuthError)
        -> Key
    {
        lock.withLock { recorded.append("unlock") }
        return try open(SecretBytes(utf8: secret))
    }

    func unlockHardwareKey<Key>(reason: String, _ open: (SecretBytes?) throws(KeyAuthError) -> Key)
        async throws(KeyAuthError) -> Key
    {
        lock.withLock { recorded.append("unlockHardwareKey") }
        return try open(SecretBytes(utf8: secret))
    }

    func secretForNewKey(reason: String, minimumLength: Int, confirm: Bool) async throws(KeyAuthError)
        -> SecretBytes?
    {
        lock.withLock { recorded.append("secretForNewKey(minimum \(minimumLength), confirm \(confirm))") }
        return SecretBytes(utf8: secret)
    }
}
