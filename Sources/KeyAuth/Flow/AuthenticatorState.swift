/// Where an ``Authenticator`` is in its flow, for progress display (a spinner, a status line).
public enum AuthenticatorState: Sendable, Equatable, CustomStringConvertible {
    case idle
    case checkingPresence
    case generatingKey
    case registering
    /// The server registered the key as pending: another device of the user must approve it.
    case awaitingApproval(keyID: String)
    case signing
    case authenticating
    case authenticated
    case failed(KeyAuthError.Code)

    public var description: String {
        switch self {
        case .idle: "idle"
        case .checkingPresence: "checking presence"
        case .generatingKey: "generating key"
        case .registering: "registering"
        case .awaitingApproval: "awaiting approval"
        case .signing: "signing"
        case .authenticating: "authenticating"
        case .authenticated: "authenticated"
        case .failed(let code): "failed (\(code))"
        }
    }
}

/// What a server said about a newly registered key.
public enum RegistrationStatus: String, Sendable, Codable {
    /// The key can log in now.
    case active
    /// The key waits for approval by another device of the same user.
    case pending
}
