import Foundation
import KeyAuth

/// A command line, parsed and checked: what ``KeyAuthCommand`` runs.
public enum Command: Sendable, Equatable {
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
}

/// The commands of PROTOCOL.md section 7, plus `help`.
public enum CommandName: String, Sendable, CaseIterable {
    case register, login, token, proof, logout, status, devices, pubkey, pin, reset, requests, approve, deny, agent
    case defaultAccount = "default"
    case help
}

/// `keyauth requests`.
public struct RequestsOptions: Sendable, Equatable {
    /// `--watch`: wait for new requests and offer to answer each.
    public var watch = false
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`.
    public var pinFromStandardInput = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth approve [ID]` and `keyauth deny ID`.
public struct AnswerOptions: Sendable, Equatable {
    /// Approve or deny.
    public var decision: SignInDecision
    /// The request; nil (approve only) for the only open one, or a choice.
    public var requestID: String?
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`: the PIN is read from standard input, after the code.
    public var pinFromStandardInput = false

    /// Creates options.
    public init(decision: SignInDecision, requestID: String?) {
        self.decision = decision
        self.requestID = requestID
    }
}

/// `keyauth register`.
public struct RegisterOptions: Sendable, Equatable {
    /// `--server URL`, normalized without a trailing slash.
    public var serverURL: String
    /// `--user NAME`.
    public var user: String
    /// `--name DEVICE`; the host name when nil.
    public var deviceName: String?
    /// `--bits 2048|3072|4096`; nil for the key store's default (3072 for a key file, the TPM's
    /// largest up to 3072 for a TPM key).
    public var bits: Int?
    /// `--key-store tpm|file|auto`; nil for `auto`: the TPM when one answers, a key file otherwise.
    public var keyStore: KeyStore.Kind?
    /// `--presence pin|pam|none`.
    public var presence: PresenceKind = .pin
    /// `--pam-service NAME`.
    public var pamService: String = "keyauth"
    /// `--pin-stdin`.
    public var pinFromStandardInput = false
    /// `--enrollment-code CODE`.
    public var enrollmentCode: String?
    /// `--enrollment-code -`: read the code from the first line of standard input.
    public var enrollmentCodeFromStandardInput = false
    /// `--insecure-http`: accept plain `http://` to a host that is not loopback.
    public var insecureHTTP = false
    /// `--account NAME`.
    public var account: String?
    /// `--no-wait`.
    public var noWait = false

    /// Creates options with the defaults of PROTOCOL.md section 7.
    public init(serverURL: String, user: String) {
        self.serverURL = serverURL
        self.user = user
    }
}

/// `keyauth login`.
public struct LoginOptions: Sendable, Equatable {
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`.
    public var pinFromStandardInput = false
    /// `--no-wait`: fail at once while the device waits for approval.
    public var noWait = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth token`.
public struct TokenOptions: Sendable, Equatable {
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`.
    public var pinFromStandardInput = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth proof`.
public struct ProofOptions: Sendable, Equatable {
    /// `METHOD`: the HTTP method of the request the proof is for.
    public var method: String
    /// `URL`: the request's URL (its query is left out of the proof).
    public var url: String
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`.
    public var pinFromStandardInput = false
    /// `--nonce VALUE`: the server's `DPoP-Nonce`, when it asks for one.
    public var nonce: String?

    /// Creates options for a request of `method` to `url`.
    public init(method: String, url: String) {
        self.method = method
        self.url = url
    }
}

/// `keyauth logout`.
public struct LogoutOptions: Sendable, Equatable {
    /// `--account NAME`.
    public var account: String?

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth pin change`.
public struct PINChangeOptions: Sendable, Equatable {
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`: the current PIN on the first line of standard input, the new one on the
    /// second.
    public var pinFromStandardInput = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth status`.
public struct StatusOptions: Sendable, Equatable {
    /// `--account NAME`; all accounts when nil.
    public var account: String?
    /// `--json`.
    public var json = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth devices`.
public struct DevicesOptions: Sendable, Equatable {
    /// What to do with the user's devices.
    public enum Action: Sendable, Equatable {
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
    public var action: Action = .list
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`.
    public var pinFromStandardInput = false
    /// `--json` (for `list`).
    public var json = false

    /// Creates the defaults.
    public init(action: Action = .list) { self.action = action }
}

/// `keyauth pubkey`.
public struct PubkeyOptions: Sendable, Equatable {
    /// `--account NAME`.
    public var account: String?
    /// `--jwk`: print a JWK instead of PEM.
    public var jwk = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth reset`.
public struct ResetOptions: Sendable, Equatable {
    /// `--account NAME`.
    public var account: String?
    /// `--local-only`: delete here without telling the server (it is gone).
    public var localOnly = false
    /// `--pin-stdin`.
    public var pinFromStandardInput = false
    /// `--yes`: do not ask for confirmation on a terminal.
    public var assumeYes = false

    /// Creates the defaults.
    public init(account: String? = nil) { self.account = account }
}

/// `keyauth agent`.
public struct AgentOptions: Sendable, Equatable {
    /// What to do.
    public enum Action: Sendable, Equatable {
        /// Start an agent, or unlock the running one.
        case start
        /// `--lock`: clear what the running agent holds; it keeps running.
        case lock
        /// `--stop`: end the running agent.
        case stop
    }

    /// How long an agent holds a key by default: 8 hours, a working day.
    public static let defaultTimeout: TimeInterval = 8 * 3600

    /// The action.
    public var action: Action = .start
    /// `--account NAME`.
    public var account: String?
    /// `--pin-stdin`.
    public var pinFromStandardInput = false
    /// `--timeout DURATION`, in seconds.
    public var timeout: TimeInterval = defaultTimeout

    /// Creates the defaults.
    public init(action: Action = .start) { self.action = action }

    /// Reads a duration: whole numbers each followed by `s`, `m`, `h` or `d` (`8h`, `1h30m`,
    /// `90s`), or a bare number of seconds; nil for anything else or for zero.
    public static func seconds(fromDuration text: String) -> TimeInterval? {
        if let plain = Int(text) { return plain > 0 ? TimeInterval(plain) : nil }
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var total = 0
        var digits = ""
        for character in text {
            if character.isASCII, character.isNumber {
                digits.append(character)
            } else if let unit = units[character], let value = Int(digits), value <= 1_000_000 {
                total += value * unit
                digits = ""
            } else {
                return nil
            }
        }
        return digits.isEmpty && total > 0 ? TimeInterval(total) : nil
    }
}
