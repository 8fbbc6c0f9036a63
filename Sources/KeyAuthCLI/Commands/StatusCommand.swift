import Foundation
import KeyAuth

/// `keyauth status`: what is stored here, without contacting the server or asking for a PIN.
///
/// For an account with a TPM key it also asks the TPM who made it; a TPM that does not answer is
/// reported as such, and the rest of the status is shown all the same.
struct StatusCommand {
    let context: CommandContext
    let options: StatusOptions

    func run() throws(KeyAuthError) {
        let accounts = try context.accountStore()
        let names: [String]
        if let explicit = options.account {
            names = [try AccountSession.resolve(accounts, explicit)]
        } else {
            names = accounts.accountNames()
        }
        let defaultName =
            try accounts.defaultAccountName().flatMap { accounts.exists($0) ? $0 : nil }
            ?? (names.count == 1 && options.account == nil ? names.first : nil)
        var entries: [JSONValue] = []
        var lines: [String] = []
        let now = Date()
        var tpm: TPMReport?
        let agent = AgentReport.current(environment: context.io.environment)
        // Without --account, one account that cannot be read does not hide the others: it is
        // listed with its error, and the command exits with that error after showing the rest.
        // The same for its key or token file (too open, damaged).
        var unreadable: [KeyAuthError] = []
        for name in names {
            let account: KeyAuthAccount
            let keys: KeyPairStore
            let publicKey: RSAPublicKey?
            let token: AccessToken?
            do {
                account = try accounts.load(name)
                keys = try accounts.keyPairStore(for: name)
                do {
                    publicKey = try keys.loadPublicKey()
                } catch  where error.code == .keyNotFound {
                    publicKey = nil
                }
                token = try accounts.credentials.loadToken(account: name)
            } catch {
                guard options.account == nil else { throw error }
                unreadable.append(error)
                entries.append(.object(["name": .string(name), "error": .string(error.message)]))
                lines.append(name)
                lines.append("  problem:     cannot be read: \(error.message)")
                continue
            }
            let tokenValid = token.map { $0.expiresAt > now } ?? false
            let keyStore = keys.storedKind ?? account.keyStore
            if keyStore == .tpm, tpm == nil { tpm = TPMReport(context: context) }
            let report = keyStore == .tpm ? tpm : nil
            let removing = accounts.isBeingRemoved(name)
            var entry: [String: JSONValue] = [
                "name": .string(name), "default": .bool(name == defaultName), "server": .string(account.serverURL),
                "issuer": .string(account.issuer), "user": .string(account.user),
                "device_name": .string(account.deviceName), "presence": .string(account.presence.rawValue),
                "status": .string(account.status.rawValue), "has_key": .bool(keys.hasKey),
                "token_valid": .bool(tokenValid), "insecure_http": .bool(account.insecureHTTP),
                "key_store": .string(keyStore.rawValue), "removing": .bool(removing),
            ]
            entry["tpm_available"] = report.map { .bool($0.info != nil) } ?? .null
            entry["tpm_manufacturer"] = report?.info.map { .string($0.manufacturer) } ?? .null
            entry["kid"] = (publicKey?.fingerprint ?? account.keyID).map(JSONValue.string) ?? .null
            entry["key_bits"] = publicKey.map { .integer(Int64($0.bits)) } ?? .null
            entry["pam_service"] = account.pamService.map(JSONValue.string) ?? .null
            entry["tier"] = account.tier.map { .string($0.rawValue) } ?? .null
            entry["refused_at"] = account.refusedAt.map { .string(Formatting.timestamp($0)) } ?? .null
            entry["token_expires_at"] = token.map { .string(Formatting.timestamp($0.expiresAt)) } ?? .null
            let ownAgent = agent?.account == name ? agent : nil
            entry["agent"] = ownAgent.map { .string($0.locked ? "locked" : "unlocked") } ?? .null
            entry["agent_expires_at"] = ownAgent?.expiresAt.map { .string(Formatting.timestamp($0)) } ?? .null
            entries.append(.object(entry))

            lines.append(name + (name == defaultName ? " (default)" : ""))
            let plainHTTP = account.insecureHTTP ? " (plain HTTP allowed by --insecure-http)" : ""
            lines.append("  server:      \(account.serverURL)\(plainHTTP)")
            if account.issuer != account.serverURL { lines.append("  issuer:      \(account.issuer)") }
            lines.append("  user:        \(account.user)")
            lines.append("  device:      \(account.deviceName)")
            let fingerprint = publicKey.map { "\($0.fingerprint) (RSA \($0.bits))" } ?? "no key"
            lines.append("  fingerprint: \(fingerprint)")
            lines.append("  key store:   \(report?.summary ?? keyStore.rawValue)")
            if let tier = account.tier { lines.append("  tier:        \(tier.rawValue) (as the server recorded it)") }
            let presence =
                account.presence == .pam
                ? "pam (service \(account.pamService ?? "keyauth"))" : account.presence.rawValue
            lines.append("  presence:    \(presence)")
            if let refusedAt = account.refusedAt {
                lines.append(
                    "  status:      refused by the server at \(Formatting.timestamp(refusedAt)): revoked, or unknown "
                        + "to this server; run `keyauth reset --account \(name)` and register again")
            } else {
                lines.append("  status:      \(account.status.rawValue)")
            }
            lines.append("  token:       \(Self.describe(token, now: now))")
            if let problem = Self.keyProblem(account, removing: removing, hasKey: keys.hasKey) {
                lines.append("  problem:     \(problem)")
            }
            if let ownAgent { lines.append("  agent:       \(ownAgent.summary)") }
        }
        if options.json {
            let document = JSONValue.object([
                "accounts": .array(entries), "default": defaultName.map(JSONValue.string) ?? .null,
                "home": .string(accounts.home),
            ])
            context.io.printOutput(document.serialized(leadingKeys: ["home", "default", "accounts", "name"]))
        } else if names.isEmpty {
            context.io.printOutput("No accounts in \(accounts.home); run `keyauth register --server URL --user NAME`.")
        } else {
            context.io.printOutput(lines.joined(separator: "\n"))
        }
        if let first = unreadable.first {
            let count = unreadable.count == 1 ? "" : " (and \(unreadable.count - 1) more)"
            throw KeyAuthError(first.code, first.message + count, underlying: first.underlying)
        }
    }

    /// What is wrong with the account's files, for the human output: a removal that stopped
    /// halfway, or a private key that is gone while the account says it registered one.
    static func keyProblem(_ account: KeyAuthAccount, removing: Bool, hasKey: Bool) -> String? {
        let name = account.name
        if removing {
            return "an earlier `keyauth reset` began deleting this account and stopped; "
                + "run `keyauth reset --account \(name)` to finish"
        }
        // A registration interrupted before its key was made has none yet; any later state had one.
        guard !hasKey, account.status != .registering else { return nil }
        return "the private key is missing, so this device cannot log in; run `keyauth reset --account \(name) "
            + "--local-only` to delete the account here, and revoke the device from another one"
    }

    /// What the TPM of `KEYAUTH_TPM_TCTI` says about itself, asked once per run.
    struct TPMReport {
        /// Its properties, or nil when it did not answer.
        let info: TPMInfo?
        /// The line for the key store: `tpm (manufacturer IBM)`, or why the TPM cannot be asked.
        let summary: String

        init(context: CommandContext) {
            do {
                let connection = try context.tpmConnection()
                let info = try connection.info()
                self.info = info
                let lockout = info.isLockedOut ? ", locked after too many wrong PINs" : ""
                summary = "tpm (manufacturer \(info.manufacturer)\(lockout))"
            } catch {
                info = nil
                summary = "tpm (\(error.message))"
            }
        }
    }

    static func describe(_ token: AccessToken?, now: Date) -> String {
        guard let token else { return "none" }
        let remaining = token.expiresAt.timeIntervalSince(now)
        guard remaining > 0 else { return "expired at \(Formatting.timestamp(token.expiresAt))" }
        return "valid until \(Formatting.timestamp(token.expiresAt)) (\(Formatting.duration(remaining)) left)"
    }
}
