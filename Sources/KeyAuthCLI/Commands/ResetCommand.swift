import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth reset`: revoke the key on the server first, then delete the key, account and tokens
/// here; `--local-only` skips the server when it is gone.
///
/// A device the server has refused (revoked, or unknown to it) cannot revoke itself and is no
/// threat: it is deleted here after saying so, without asking for the PIN first. A deletion here
/// that an earlier run began and did not finish is finished without the server.
struct ResetCommand {
    let context: CommandContext
    let options: ResetOptions

    func run() async throws(KeyAuthError) {
        let io = context.io
        let accounts = try context.accountStore()
        let name = try AccountSession.resolve(accounts, options.account)
        if options.localOnly {
            try await confirm("Delete account \(name) here, without telling the server?")
            try accounts.remove(name)
            io.printOutput("Deleted account \(name) here; the server was not told, so the key stays registered there.")
            return
        }
        if accounts.isBeingRemoved(name) {
            // The run that began the removal had revoked the device, or the server had refused
            // it, or it was told not to ask the server: only the deletion here is left.
            try await confirm("Finish deleting account \(name) here, which an earlier `keyauth reset` began?")
            try accounts.remove(name)
            io.printOutput("Finished deleting account \(name) here, which an earlier `keyauth reset` began.")
            return
        }
        let account: KeyAuthAccount
        do {
            account = try accounts.load(name)
        } catch {
            guard error.code == .accountCorrupt else { throw error }
            throw KeyAuthError(
                .accountCorrupt,
                error.message + "; the server cannot be told from it: run `keyauth reset --account \(name) "
                    + "--local-only` to delete it here, and revoke the device from another one")
        }
        if let refusedAt = account.refusedAt {
            try await confirm("Delete account \(name) here?")
            try removeRefused(accounts, account, refusedAt: refusedAt)
            return
        }
        try await confirm(
            "Revoke this device on \(account.serverURL) and delete account \(name) (\(account.user)) here?")
        let session = try AccountSession.open(
            context: context, account: name, pinFromStandardInput: options.pinFromStandardInput, waitForApproval: false)
        let keyID: String
        do {
            keyID = try session.keys.loadPublicKey().fingerprint
        } catch {
            guard error.code == .keyNotFound else { throw error }
            throw KeyAuthError(
                .accountCorrupt,
                "account \(name) has no public key file: run `keyauth reset --account \(name) --local-only`")
        }
        let client = session.client
        var revoked = true
        do {
            try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.revokeDevice(keyID: keyID, accessToken: token, proofs: proofs)
            }
        } catch {
            // Only keyauth-server's own word about the device (an OAuth error body) lets the key go:
            // a proxy's 403 page or a web server's 404 says nothing about it, and forgetting the
            // key then would leave the device active on the server with nobody able to revoke it.
            let statement = error.oauthError.flatMap { $0.isFromBody ? $0 : nil }
            let stated = statement?.error
            if statement?.refusesDeviceKey == true {
                try removeRefused(accounts, try accounts.load(name), refusedAt: Date())
                return
            }
            // A key that never became active cannot log in to revoke itself, and is no threat:
            // nobody else holds it and its pending registration expires on the server. Any other
            // `access_denied` (a `--device-policy` the active device does not meet) refuses its
            // login for now and leaves it active there.
            let ended = statement?.endsRegistration == true
            if stated == .accessDenied, !ended { throw Self.stillActive(error, account: name, keyID: keyID) }
            let neverActive = error.code == .approvalPending || ended
            revoked = false
            guard neverActive || stated == .notFound else {
                throw Self.unconfirmed(error, account: name)
            }
        }
        try accounts.remove(name)
        if revoked {
            io.printOutput("Revoked device \(keyID) on \(session.account.serverURL) and deleted account \(name) here.")
        } else {
            io.printOutput(
                "Deleted account \(name) here; device \(keyID) was never active on \(session.account.serverURL), "
                    + "so there was nothing to revoke.")
        }
    }

    /// The error for a revocation the server did not confirm: the key and account stay, and the
    /// message says how to forget them anyway.
    ///
    /// An answer without keyauth-server's OAuth body (a proxy's page) gets its own code, and exit
    /// status 69 with the unreachable server, since keyauth-server's answer never arrived.
    static func unconfirmed(_ error: KeyAuthError, account: String) -> KeyAuthError {
        let localOnly = "use `keyauth reset --account \(account) --local-only` to delete it here anyway"
        if error.code == .transportFailed {
            return KeyAuthError(error.code, error.message + "; " + localOnly, underlying: error.underlying)
        }
        if let oauth = error.oauthError, !oauth.isFromBody {
            return KeyAuthError(
                .revocationUnconfirmed,
                "the revocation was not confirmed: the server answered HTTP \(oauth.statusCode) without "
                    + "keyauth-server's error body (a proxy or another web server?); the key and account "
                    + "are kept; " + localOnly,
                underlying: oauth)
        }
        return error
    }

    /// The error for a device the server keeps active but will not let log in now: it cannot
    /// revoke itself, so the key and account stay, and the message says who can revoke it.
    static func stillActive(_ error: KeyAuthError, account: String, keyID: String) -> KeyAuthError {
        KeyAuthError(
            error.code,
            error.message + "; the device stays registered on the server and could not revoke itself: the key "
                + "and account are kept; revoke it from another device (`keyauth devices revoke \(keyID)`), "
                + "then run `keyauth reset --account \(account) --local-only`",
            underlying: error.underlying)
    }

    /// Deletes an account whose key the server refused, saying so: there is nothing to revoke.
    private func removeRefused(
        _ accounts: AccountStore, _ account: KeyAuthAccount, refusedAt: Date
    ) throws(KeyAuthError) {
        try accounts.remove(account.name)
        context.io.printOutput(
            "The server refused this device at \(Formatting.timestamp(refusedAt)) (revoked, or unknown to "
                + "\(account.serverURL)), so there is nothing to revoke; deleted account \(account.name) here.")
    }

    /// Asks `question` on the terminal when a person is there and `--yes` was not given.
    ///
    /// Scripts (standard input not a terminal) are not asked, as before the question existed.
    /// - Throws: `.cancelled` for any answer but yes.
    private func confirm(_ question: String) async throws(KeyAuthError) {
        let io = context.io
        guard !options.assumeYes, isatty(io.standardInput) == 1, io.terminalReader.isAvailable() else { return }
        let declined = KeyAuthError(.declined, "nothing was deleted (answer y to confirm, or pass --yes)")
        let answer: SecretBytes
        do {
            answer = try await BlockingThread.read(io.terminalReader, prompt: question + " [y/N] ", echo: true)
        } catch  where error.code == .cancelled {
            // Ctrl-D at the question is an answer other than yes (Ctrl-C stops the command).
            throw declined
        }
        let text = answer.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
            .trimmingCharacters(in: .whitespaces).lowercased()
        guard text == "y" || text == "yes" else { throw declined }
    }
}
