import Foundation
import KeyAuth

/// What every command builds its work from: the I/O, the keyauth home, clients and presence
/// checks made the same way for all of them.
struct CommandContext: Sendable {
    let io: CommandIO

    /// The accounts under `$KEYAUTH_HOME` (or its XDG default).
    func accountStore() throws(KeyAuthError) -> AccountStore {
        AccountStore(home: try AccountStore.defaultHome(environment: io.environment))
    }

    /// Seconds a request may take: `KEYAUTH_TIMEOUT` when it is a number above 0 and at most a
    /// day, else 10. `inf` and `nan` parse as numbers too, and neither is a timeout.
    var timeout: TimeInterval {
        if let text = io.environment["KEYAUTH_TIMEOUT"], let value = TimeInterval(text), value > 0,
            value <= Self.maximumTimeout
        {
            return value
        }
        return 10
    }

    /// The longest `KEYAUTH_TIMEOUT` taken: a day.
    static let maximumTimeout: TimeInterval = 86_400

    /// The error when `--pin-stdin` finds standard input empty: what was expected, and where.
    static let pinInputEnded = "standard input ended before the PIN (--pin-stdin reads it from there)"

    /// A client for `serverURL` with the configured timeout.
    ///
    /// - Parameter insecureHTTP: `--insecure-http` at registration, remembered by the account.
    func client(for serverURL: String, insecureHTTP: Bool) throws(KeyAuthError) -> KeyAuthClient {
        try KeyAuthClient(serverURL: serverURL, timeout: timeout, allowInsecureHTTP: insecureHTTP)
    }

    /// The TPM that `KEYAUTH_TPM_TCTI` names, or the kernel resource manager.
    ///
    /// Asked only where a TPM is used (a TPM key, `--key-store tpm|auto`), so that a malformed
    /// variable does not stop accounts with key files.
    /// - Throws: `.usage` naming the variable when it is not a TCTI string.
    func tpmConnection() throws(KeyAuthError) -> TPMConnection {
        do {
            return try TPMConnection.fromEnvironment(io.environment)
        } catch {
            throw KeyAuthError(.usage, "\(TPMConnection.environmentVariable): \(error.message)")
        }
    }

    /// The presence check of an account, reading answers from standard input with `--pin-stdin`
    /// and from the terminal otherwise.
    ///
    /// - Throws: `.presenceUnavailable` before anything happens when the PIN would have to be
    ///   asked on a terminal that does not exist.
    func presence(
        kind: PresenceKind, pamService: String?, pinFromStandardInput: Bool, keyDirectory: String
    ) throws(KeyAuthError) -> any PresenceCheck {
        let reader: any SecretReader =
            !pinFromStandardInput
            ? io.terminalReader
            : kind == .pin
                ? StandardInputSecretReader(fileDescriptor: io.standardInput, endOfInputMessage: Self.pinInputEnded)
                : StandardInputSecretReader(fileDescriptor: io.standardInput)
        switch kind {
        case .pin:
            guard reader.isAvailable() else {
                throw KeyAuthError(
                    .presenceUnavailable,
                    "there is no terminal to ask for the PIN: use --pin-stdin to read it from standard input")
            }
            var check = PINPresence(reader: reader, attemptsFile: KeyPairStore(directory: keyDirectory).pinAttemptsPath)
            // Standard input holds one answer: asking again would read the next line.
            if pinFromStandardInput { check.attemptsPerRun = 1 }
            return check
        case .pam:
            return PAMPresence(
                serviceName: pamService ?? "keyauth", configurationDirectory: io.pamConfigurationDirectory,
                prompter: reader)
        case .none:
            return NoPresence()
        }
    }
}
