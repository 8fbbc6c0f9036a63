import Foundation
import KeyAuth
import KeyAuthArguments

/// A command line, parsed and checked: what ``KeyAuthCommand`` runs.
package enum Command: Sendable, Equatable {
    /// `keyauth --help`, `keyauth help [COMMAND]`, `keyauth COMMAND --help`.
    case help(topic: CommandName?)
    /// `keyauth --version`.
    case version
    /// `keyauth register ...`.
    case register(RegisterOptions)
    /// `keyauth login ...`.
    case login(LoginOptions)
    /// `keyauth token ...`.
    case token(TokenOptions)
    /// `keyauth proof METHOD URL ...`.
    case proof(ProofOptions)
    /// `keyauth logout ...`.
    case logout(LogoutOptions)
    /// `keyauth pin change ...`.
    case pinChange(PINChangeOptions)
    /// `keyauth default [ACCOUNT]`: show or set the default account.
    case defaultAccount(account: String?)
    /// `keyauth status ...`.
    case status(StatusOptions)
    /// `keyauth devices ...`.
    case devices(DevicesOptions)
    /// `keyauth pubkey ...`.
    case pubkey(PubkeyOptions)
    /// `keyauth reset ...`.
    case reset(ResetOptions)
    /// `keyauth requests ...`.
    case requests(RequestsOptions)
    /// `keyauth approve ...` and `keyauth deny ...`.
    case answer(AnswerOptions)
    /// `keyauth agent ...`.
    case agent(AgentOptions)
    /// `keyauth ssh cert|config ...`.
    case ssh(SSHOptions)
    /// `keyauth recovery-codes ...`.
    case recoveryCodes(RecoveryCodesOptions)
    /// `keyauth attest ...`.
    case attest(AttestOptions)
}

/// The commands of PROTOCOL.md section 7, plus `help`.
package enum CommandName: String, Sendable, CaseIterable {
    case register, login, token, proof, logout, status, devices, pubkey, pin, reset, requests, approve, deny, agent
    case ssh, attest
    case recoveryCodes = "recovery-codes"
    case defaultAccount = "default"
    case help
}

/// `keyauth recovery-codes`.
package struct RecoveryCodesOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth attest`.
package struct AttestOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth requests`.
package struct RequestsOptions: Sendable, Equatable {
    /// `--watch`: wait for new requests and offer to answer each.
    package var watch = false
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--json`: the list as one JSON document.
    package var json = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth approve [ID]` and `keyauth deny ID`.
package struct AnswerOptions: Sendable, Equatable {
    /// Approve or deny.
    package var decision: SignInDecision
    /// The request; nil (approve only) for the only open one, or a choice.
    package var requestID: String?
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`: the PIN is read from standard input, after the code.
    package var pinFromStandardInput = false

    /// Creates options.
    package init(decision: SignInDecision, requestID: String?) {
        self.decision = decision
        self.requestID = requestID
    }
}

/// `keyauth register`.
package struct RegisterOptions: Sendable, Equatable {
    /// `--server URL`, normalized without a trailing slash.
    package var serverURL: String
    /// `--user NAME`.
    package var user: String
    /// `--name DEVICE`; the host name when nil.
    package var deviceName: String?
    /// `--bits 2048|3072|4096`; nil for the key store's default (3072 for a key file, the TPM's
    /// largest up to 3072 for a TPM key).
    package var bits: Int?
    /// `--key-store tpm|file|auto`; nil for `auto`: the TPM when one answers, a key file otherwise.
    package var keyStore: KeyStore.Kind?
    /// `--presence pin|pam|none`.
    package var presence: PresenceKind = .pin
    /// `--pam-service NAME`.
    package var pamService: String = "keyauth"
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--enrollment-code CODE`.
    package var enrollmentCode: String?
    /// `--enrollment-code -`: read the code from the first line of standard input.
    package var enrollmentCodeFromStandardInput = false
    /// `--recovery-code CODE`: one of the user's recovery codes, when every device is lost.
    package var recoveryCode: String?
    /// `--recovery-code -`: read it from the first line of standard input.
    package var recoveryCodeFromStandardInput = false
    /// `--insecure-http`: accept plain `http://` to a host that is not loopback.
    package var insecureHTTP = false
    /// `--account NAME`.
    package var account: String?
    /// `--no-wait`.
    package var noWait = false

    /// Creates options with the defaults of PROTOCOL.md section 7.
    package init(serverURL: String, user: String) {
        self.serverURL = serverURL
        self.user = user
    }
}

/// `keyauth login`.
package struct LoginOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--no-wait`: fail at once while the device waits for approval.
    package var noWait = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth token`.
package struct TokenOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth proof`.
package struct ProofOptions: Sendable, Equatable {
    /// `METHOD`: the HTTP method of the request the proof is for.
    package var method: String
    /// `URL`: the request's URL (its query is left out of the proof).
    package var url: String
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--nonce VALUE`: the server's `DPoP-Nonce`, when it asks for one.
    package var nonce: String?

    /// Creates options for a request of `method` to `url`.
    package init(method: String, url: String) {
        self.method = method
        self.url = url
    }
}

/// `keyauth logout`.
package struct LogoutOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth pin change`.
package struct PINChangeOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`: the current PIN on the first line of standard input, the new one on the
    /// second.
    package var pinFromStandardInput = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth status`.
package struct StatusOptions: Sendable, Equatable {
    /// `--account NAME`; all accounts when nil.
    package var account: String?
    /// `--json`.
    package var json = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth devices`.
package struct DevicesOptions: Sendable, Equatable {
    /// What to do with the user's devices.
    package enum Action: Sendable, Equatable {
        /// `list` (the default).
        case list
        /// `approve KID`: a whole key ID, or a unique prefix of at least 8 characters (the short
        /// code a pending registration prints).
        case approve(keyID: String)
        /// `approve` alone: show the pending devices and ask which.
        case choosePending
        /// `revoke KID`: a whole key ID or a unique prefix, as for `approve`.
        case revoke(keyID: String)
    }

    /// The action.
    package var action: Action = .list
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--json` (for `list`).
    package var json = false

    /// Creates the defaults.
    package init(action: Action = .list) { self.action = action }
}

/// `keyauth pubkey`.
package struct PubkeyOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--jwk`: print a JWK instead of PEM.
    package var jwk = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth ssh cert [--write PATH]` and `keyauth ssh config`.
package struct SSHOptions: Sendable, Equatable {
    /// What to do.
    package enum Action: Sendable, Equatable {
        /// Get a certificate and save it (beside the key, or at `write`), printing its line.
        case certificate(write: String?)
        /// Print the lines of `~/.ssh/config` that use the device key and its certificate.
        case config
    }

    package var action: Action
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false

    /// Creates options.
    package init(action: Action, account: String? = nil) {
        self.action = action
        self.account = account
    }
}

/// `keyauth reset`.
package struct ResetOptions: Sendable, Equatable {
    /// `--account NAME`.
    package var account: String?
    /// `--local-only`: delete here without telling the server (it is gone).
    package var localOnly = false
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--yes`: do not ask for confirmation on a terminal.
    package var assumeYes = false

    /// Creates the defaults.
    package init(account: String? = nil) { self.account = account }
}

/// `keyauth agent`.
package struct AgentOptions: Sendable, Equatable {
    /// What to do.
    package enum Action: Sendable, Equatable {
        /// Start an agent, or unlock the running one.
        case start
        /// `--lock`: clear what the running agent holds; it keeps running.
        case lock
        /// `--stop`: end the running agent.
        case stop
    }

    /// How long an agent holds a key by default: 8 hours, a working day.
    package static let defaultTimeout: TimeInterval = 8 * 3600

    /// The timeouts an agent accepts, from `--timeout` and in an `unlock` request alike: what
    /// ``seconds(fromDuration:)`` can yield, 1 second to ``DurationText/largestSeconds``.
    ///
    /// A request's timeout is a JSON number that could be anything; the one range keeps the
    /// socket from granting what the command line refuses.
    package static let timeoutRange: ClosedRange<TimeInterval> = 1...TimeInterval(DurationText.largestSeconds)

    /// The action.
    package var action: Action = .start
    /// `--account NAME`.
    package var account: String?
    /// `--pin-stdin`.
    package var pinFromStandardInput = false
    /// `--timeout DURATION`, in seconds.
    package var timeout: TimeInterval = defaultTimeout
    /// `--background`: start the agent detached and print shell lines for `eval`, as
    /// `ssh-agent` does.
    package var background = false
    /// `--serve-locked`: what `--background` starts, detached: serve locked, print nothing, and
    /// wait for the starting command to unlock it through the socket.
    package var servesLocked = false

    /// Creates the defaults.
    package init(action: Action = .start) { self.action = action }

    /// Reads a duration in the syntax every option of `keyauth` and `keyauth-server` shares
    /// (``DurationText``: `8h`, `1h30m`, `90s`, or a bare number of seconds); nil for anything
    /// else or for zero.
    package static func seconds(fromDuration text: String) -> TimeInterval? {
        guard let seconds = DurationText.seconds(text), seconds > 0 else { return nil }
        return TimeInterval(seconds)
    }
}
