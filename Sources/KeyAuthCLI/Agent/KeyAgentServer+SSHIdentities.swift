import Foundation
import KeyAuth

extension KeyAgentServer {
    /// The identities the ssh socket offers: the certificate from `keyauth ssh cert` when it is
    /// there and certifies the key, then the plain key; nil while locked.
    func sshIdentities() -> [SSHAgentProtocol.Identity]? {
        clearIfExpired()
        guard expiresAt != nil, let key = keyIfUnchanged(),
            let plain = try? SSHAgentProtocol.rsaKeyBlob(key)
        else { return nil }
        var identities: [SSHAgentProtocol.Identity] = []
        let certificatePath = SSHCommand.certificatePath(in: store.directory)
        if let line = try? String(contentsOfFile: certificatePath, encoding: .utf8),
            let blob = SSHAgentProtocol.certificateBlob(line: line, of: key)
        {
            identities.append(.init(blob: blob, comment: "\(certificatePath) (keyauth \(account))"))
        }
        identities.append(.init(blob: plain, comment: "keyauth \(account) \(keyID)"))
        return identities
    }

    /// Signs with the held key (RS256), or fails with `.presenceUnavailable` while locked.
    func sign(_ message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try sshSign(message, digest: .sha256)
    }

    /// The account's public key when it is still the one this agent started for; otherwise nil,
    /// and what the agent holds is dropped.
    ///
    /// `keyauth reset` deletes the account's key files but cannot reach into the agent's memory:
    /// without this, the agent went on signing with a key the user had thrown away (still
    /// registered, after `reset --local-only`) until its timeout, and after a new registration
    /// under the same name it offered the new key while signing with the old one, or tried the
    /// old PIN on the new TPM key, a try of the TPM's lockout counter.
    func keyIfUnchanged() -> RSAPublicKey? {
        guard let key = try? store.loadPublicKey(), key.fingerprint == keyID else {
            clear()
            return nil
        }
        return key
    }

    /// Throws, with what the agent holds dropped, unless the account's key is still the agent's.
    func checkKeyUnchanged() throws(KeyAuthError) {
        guard keyIfUnchanged() == nil else { return }
        throw KeyAuthError(
            .keyNotFound,
            "account \(account)'s device key is no longer the one this agent started with "
                + "(reset, or registered again), so the agent is locked; stop it and start it again")
    }
}
