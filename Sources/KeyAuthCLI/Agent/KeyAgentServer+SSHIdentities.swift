import Foundation
import KeyAuth

extension KeyAgentServer {
    /// The identities the ssh socket offers: the certificate from `keyauth ssh cert` when it is
    /// there and certifies the key, then the plain key; nil while locked.
    func sshIdentities() -> [SSHAgentProtocol.Identity]? {
        clearIfExpired()
        guard expiresAt != nil, let key = try? store.loadPublicKey(),
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
}
