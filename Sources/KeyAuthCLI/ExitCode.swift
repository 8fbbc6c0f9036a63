import KeyAuth

/// The exit statuses of PROTOCOL.md section 7, from `sysexits.h`.
package enum ExitCode: Int32, Sendable {
    /// The command did what was asked.
    case success = 0
    /// Anything not listed below.
    case failure = 1
    /// The command line is wrong (EX_USAGE).
    case usage = 64
    /// A key or account file is corrupt or unprotected, or the agent's socket is not the user's
    /// own (EX_DATAERR).
    case dataError = 65
    /// The server or the TPM cannot be reached or is unavailable, or something other than
    /// keyauth-server answered `keyauth reset` (EX_UNAVAILABLE).
    case unavailable = 69
    /// The server limits this address for now (429 `slow_down`), or the device waits for
    /// approval (`--no-wait`); the same command succeeds later (EX_TEMPFAIL), so a script can
    /// tell it from a refusal and retry.
    case temporaryFailure = 75
    /// The presence check failed or the server refused the login (EX_NOPERM).
    case noPermission = 77

    /// The status for an error, decided in this one place.
    package init(for error: KeyAuthError) {
        switch error.code {
        case .usage:
            self = .usage
        case .keyCorrupt, .keyUnprotected, .accountCorrupt, .agentUntrusted:
            self = .dataError
        case .transportFailed, .tpmUnavailable, .revocationUnconfirmed:
            self = .unavailable
        case .approvalPending:
            self = .temporaryFailure
        case .presenceDenied, .presenceUnavailable, .wrongPIN, .keyEncrypted, .lockedOut, .cancelled,
            .registrationEnded:
            self = .noPermission
        case .serverRejected:
            switch error.oauthError?.error {
            case let code? where OAuthError.Code.loginRefusals.contains(code): self = .noPermission
            case .temporarilyUnavailable?: self = .unavailable
            case .slowDown?: self = .temporaryFailure
            default: self = .failure
            }
        default:
            self = .failure
        }
    }
}

extension KeyAuthError.Code {
    /// The command line is wrong (an unknown option, a missing value); `keyauth` exits 64.
    package static let usage = KeyAuthError.Code(rawValue: "usage")
    /// No account of that name exists under the keyauth home.
    package static let accountNotFound = KeyAuthError.Code(rawValue: "account_not_found")
    /// The person answered no to a confirmation (`keyauth reset` on a terminal); exit 1.
    package static let declined = KeyAuthError.Code(rawValue: "declined")
    /// An account file is not valid: truncated, not JSON, or missing a member.
    package static let accountCorrupt = KeyAuthError.Code(rawValue: "account_corrupt")
    /// `keyauth reset` got an answer that is not keyauth-server's (no OAuth error body), so it
    /// cannot tell whether the device is still active there; exit 69, the key is kept.
    package static let revocationUnconfirmed = KeyAuthError.Code(rawValue: "revocation_unconfirmed")
}
