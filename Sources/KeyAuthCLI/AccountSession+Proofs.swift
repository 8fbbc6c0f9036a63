import KeyAuth
import Synchronization

extension AccountSession {
    /// The device key's proof builder: the one a login of this command used, or the key unlocked
    /// now (the presence check asks for the PIN of a PIN-protected key).
    func proofs() async throws(KeyAuthError) -> DPoPProofBuilder {
        if let known = proofKey.builder { return known }
        let store = keys
        if let publicKey = try? store.loadPublicKey(),
            let agent = try AgentSigner.connect(
                environment: context.io.environment, account: account.name, publicKey: publicKey)
        {
            let builder = DPoPProofBuilder(signer: agent, publicKey: publicKey.jwk)
            proofKey.set(builder)
            return builder
        }
        return try await unlockedForProofs(after: nil)
    }

    /// The device key opened through the presence check, kept for the rest of the command;
    /// opened again after `refusal`, the TPM's refusal of the PIN at the first proof.
    private func unlockedForProofs(after refusal: KeyAuthError?) async throws(KeyAuthError) -> DPoPProofBuilder {
        let presence = authenticator.presence
        let reason = "Sign a DPoP proof for \(account.serverURL) as \(account.user)"
        let key =
            if let refusal {
                try await presence.unlockDeviceKey(in: keys, reason: reason, after: refusal)
            } else {
                try await presence.unlockDeviceKey(in: keys, reason: reason)
            }
        let builder = DPoPProofBuilder(signer: FirstSignatureWatch(key), publicKey: key.publicKey.jwk)
        proofKey.set(builder)
        return builder
    }

    /// Runs `body` with the device key's proof builder (``proofs()``), asking again for a TPM
    /// key's PIN that the TPM refused at the first proof.
    ///
    /// A TPM sees a wrong PIN only when the key signs, inside `body`, after the presence check
    /// returned. When the key opened here is refused at its first signature, nothing signed has
    /// left this process, so the presence check decides as at a login whether to ask again (on a
    /// terminal up to 3 PINs for the key opened here, never after the TPM locks; one with
    /// `--pin-stdin`), and `body` runs again with the key opened anew through the presence check,
    /// not through an agent that may have started since. A cancelled prompt then ends the run
    /// with the refusal, as at a login.
    func withProofs<Value>(
        _ body: (DPoPProofBuilder) async throws(KeyAuthError) -> Value
    ) async throws(KeyAuthError) -> Value {
        var builder = try await proofs()
        var refusals = 0
        while true {
            do {
                return try await body(builder)
            } catch {
                guard error.code == .wrongPIN, let watch = builder.signer as? FirstSignatureWatch, !watch.hasSigned
                else { throw error }
                refusals += 1
                guard authenticator.presence.asksAgain(afterHardwareRefusal: error, refusals: refusals) else {
                    throw error
                }
                builder = try await unlockedForProofs(after: error)
            }
        }
    }
}

/// The proof builder an ``AccountSession`` keeps for the rest of its command.
final class ProofKey: Sendable {
    private let value = Mutex<DPoPProofBuilder?>(nil)

    var builder: DPoPProofBuilder? { value.withLock { $0 } }

    func set(_ builder: DPoPProofBuilder) {
        value.withLock { $0 = builder }
    }
}

/// A device key opened for proofs, which remembers whether it has signed anything: only a key
/// that has not may be opened again with another PIN, since a signature that left this process
/// proves the PIN was right.
final class FirstSignatureWatch: JWSSigner {
    private let key: any JWSSigner
    private let signed = Mutex(false)

    init(_ key: any JWSSigner) {
        self.key = key
    }

    var algorithm: JWSAlgorithm { key.algorithm }

    var keyID: String { key.keyID }

    var hasSigned: Bool { signed.withLock { $0 } }

    func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let signature = try key.signature(for: message)
        signed.withLock { $0 = true }
        return signature
    }
}
