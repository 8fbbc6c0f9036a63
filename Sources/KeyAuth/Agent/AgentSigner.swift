import Foundation

/// A device key held by `keyauth agent`: signs by asking the agent, so the private key (or a TPM
/// key's PIN) stays in the agent's locked memory and never enters this process.
///
/// ``AgentSigner/connect(environment:account:publicKey:)`` returns one only when an agent answers
/// on the user's socket, serves `account`, holds the key whose fingerprint is `publicKey`'s, and
/// is unlocked; otherwise the caller goes through its presence check as without an agent. A
/// socket that is not the user's own (another user's directory or listener) is an error.
///
/// ```swift
/// if let signer = try AgentSigner.connect(environment: env, account: name, publicKey: try store.loadPublicKey()) {
///     let key = DeviceKey(signer)   // no PIN asked
/// }
/// ```
public struct AgentSigner: JWSSigner {
    /// The agent's socket.
    public let socketPath: String
    /// The public key the agent's key matches.
    public let publicKey: RSAPublicKey

    /// RS256, as every keyauth device key.
    public var algorithm: JWSAlgorithm { .rs256 }

    /// The public key's fingerprint.
    public var keyID: String { publicKey.fingerprint }

    /// The agent's signer for `account`, or nil when no unlocked agent holds that account's key.
    ///
    /// - Parameters:
    ///   - environment: where `XDG_RUNTIME_DIR` is read.
    ///   - account: the account name the agent was started for.
    ///   - publicKey: the account's stored public key; an agent holding another key is ignored.
    /// - Throws: `.agentUntrusted` when the socket's directory or file, or the process listening,
    ///   is not the user's own (PROTOCOL.md section 7.1); nothing was sent. Not nil, so that the
    ///   caller does not quietly go on as if no agent were there.
    public static func connect(
        environment: [String: String], account: String, publicKey: RSAPublicKey
    ) throws(KeyAuthError) -> AgentSigner? {
        guard let path = try? KeyAgentSocket.path(environment: environment),
            let status = try KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: path),
            status.ok, status.locked == false, status.account == account, status.keyID == publicKey.fingerprint
        else { return nil }
        return AgentSigner(socketPath: path, publicKey: publicKey)
    }

    /// Asks the agent to sign `message`.
    ///
    /// - Throws: `.presenceUnavailable` when the agent went away or locked since ``connect(environment:account:publicKey:)``
    ///   (the caller's login fails as it would without an agent and a terminal); `.agentUntrusted`
    ///   when what now listens there is not the user's own; the agent's own error code otherwise.
    public func signature(for message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let request = KeyAgentRequest(op: "sign", input: Base64URL.encode(message), keyID: keyID)
        guard let response = try KeyAgentSocket.exchange(request, at: socketPath) else {
            throw KeyAuthError(.presenceUnavailable, "keyauth agent at \(socketPath) stopped answering")
        }
        guard response.ok, let encoded = response.signature, let signature = Base64URL.decode(encoded) else {
            throw KeyAuthError(
                .presenceUnavailable, "keyauth agent refused to sign: \(response.message ?? "no reason given")")
        }
        return signature
    }
}

extension DeviceKey {
    /// A key held by `keyauth agent`; the file kind, since what signs here is a socket, quick
    /// enough for the cooperative pool.
    public init(_ key: AgentSigner) {
        self.init(signer: key, publicKey: key.publicKey, kind: .file)
    }
}

extension Authenticator.Configuration {
    /// Signs with the key `keyauth agent` holds for `account` whenever an unlocked agent for it
    /// answers, and asks for presence as usual otherwise; a socket that is not the user's own
    /// agent fails the login with `.agentUntrusted`.
    ///
    /// - Parameters:
    ///   - account: the account name the agent was started for.
    ///   - environment: where `XDG_RUNTIME_DIR` is read (the process environment by default).
    public mutating func useKeyAgent(
        account: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) {
        heldKey = { (publicKey) throws(KeyAuthError) in
            try AgentSigner.connect(environment: environment, account: account, publicKey: publicKey)
                .map(DeviceKey.init)
        }
    }
}
