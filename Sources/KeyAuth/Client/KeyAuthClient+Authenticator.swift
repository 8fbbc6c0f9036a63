import Synchronization

extension KeyAuthClient {
    /// Connects an ``Authenticator`` to this server: registration with proof of possession, and
    /// login with the JWT bearer grant.
    ///
    /// While the server answers `authorization_pending`, the `authenticate` hook throws
    /// `.approvalPending` and the authenticator polls (every ``Authenticator/Configuration-swift.struct/pollInterval``,
    /// at least 5 s as RFC 8628 asks). A `slow_down` while polling waits the server's
    /// `Retry-After` (5 s without one) and keeps polling, because the server counts pending
    /// polls against the address's failure budget. `access_denied` and `expired_token` end the
    /// wait with `.serverRejected`.
    ///
    /// - Parameters:
    ///   - enrollment: who a new key belongs to; nil refuses to register, so that a login on a
    ///     machine without a key fails instead of creating one silently.
    ///   - onRegistered: called after the server recorded a new key, before any login attempt,
    ///     so that the caller can remember the key id and state (and tell the person to approve).
    ///   - onApprovalPending: called with the key id each time the server says approval is
    ///     still pending.
    ///   - dpop: when to bind tokens to the device key (``DPoPPolicy``); bound tokens need the
    ///     key for every request after, through `onProofKey`.
    ///   - onProofKey: called with the device key's proof builder after each login that bound its
    ///     token, so that the caller can sign the proofs of the requests that use it.
    public func authenticatorHooks(
        enrollment: DeviceEnrollment?,
        onRegistered: @escaping @Sendable (DeviceRegistration) async throws -> Void = { _ in },
        onApprovalPending: @escaping @Sendable (_ keyID: String) -> Void = { _ in },
        dpop: DPoPPolicy = .whenSupported,
        onProofKey: @escaping @Sendable (DPoPProofBuilder) -> Void = { _ in }
    ) -> AuthenticatorHooks<AccessToken> {
        let client = self
        let waiting = Mutex(false)
        @Sendable func logIn(_ assertion: String, _ proofs: DPoPProofBuilder?) async throws -> AccessToken {
            do throws(KeyAuthError) {
                var bind = false
                if proofs != nil { bind = try await client.shouldBindTokens(dpop) }
                let token = try await client.requestToken(assertion: assertion, proofs: bind ? proofs : nil)
                waiting.withLock { $0 = false }
                if bind, let proofs { onProofKey(proofs) }
                return token
            } catch {
                let keyID = (try? CompactJWS(parsing: assertion))?.keyID ?? ""
                if error.code == .approvalPending {
                    waiting.withLock { $0 = true }
                    onApprovalPending(keyID)
                    throw error
                }
                if error.oauthError?.error == .slowDown, waiting.withLock({ $0 }) {
                    // The server names the wait; between 5 s and 5 minutes, whatever it says.
                    try await Task.sleep(for: .seconds(min(max(5, error.retryAfter ?? 5), 300)))
                    throw KeyAuthError(
                        .approvalPending, "this device waits for approval by another device of the user",
                        underlying: error.oauthError)
                }
                throw error
            }
        }
        @Sendable func registered(_ registration: DeviceRegistration) async throws -> RegistrationStatus {
            switch registration.status {
            case .active, .pending:
                try await onRegistered(registration)
                return registration.status == .active ? .active : .pending
            case .denied, .revoked, .expired:
                throw KeyAuthError(
                    .registrationEnded,
                    "the server already has this key as \(registration.status); it cannot log in")
            default:
                // A state this client does not know (from a newer server) says nothing final.
                throw KeyAuthError(
                    .serverRejected,
                    "the server answered the registration with status \(registration.status), which this "
                        + "version of keyauth does not know")
            }
        }
        @Sendable func wanted() throws(KeyAuthError) -> DeviceEnrollment {
            guard let enrollment else {
                throw KeyAuthError(.keyNotFound, "there is no device key: register this device first")
            }
            return enrollment
        }
        var hooks = AuthenticatorHooks(
            registerPublicKey: { publicKey, proof in
                try await registered(
                    try await client.registerDevice(publicKey: publicKey, proof: proof, enrollment: try wanted()))
            },
            authenticate: { assertion in try await logIn(assertion, nil) },
            authenticateWithProofs: { assertion, proofs in try await logIn(assertion, proofs) }
        )
        // A TPM key registers with its attestation, so that the server can tell it from a key file.
        hooks.registerDeviceKey = { key, makeProof in
            guard let tpmKey = key.signer as? TPMSigningKey else {
                return try await registered(
                    try await client.registerDevice(
                        publicKey: key.publicKey, proof: try await makeProof(), enrollment: try wanted()))
            }
            return try await registered(
                try await client.registerAttestedDevice(key: tpmKey, makeProof: makeProof, enrollment: try wanted()))
        }
        return hooks
    }
}
