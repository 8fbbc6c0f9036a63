import KeyAuth

/// `keyauth reset`: revoke the key on the server first, then delete the key, account and tokens
/// here; `--local-only` skips the server when it is gone.
struct ResetCommand {
    let context: CommandContext
    let options: ResetOptions

    func run() async throws(KeyAuthError) {
        let io = context.io
        let accounts = try context.accountStore()
        let name = try AccountSession.resolve(accounts, options.account)
        if options.localOnly {
            try accounts.remove(name)
            io.printOutput("Deleted account \(name) here; the server was not told, so the key stays registered there.")
            return
        }
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
            // A key that never became active cannot log in to revoke itself, and is no threat:
            // nobody else holds it and its pending registration expires on the server.
            let neverActive =
                error.code == .approvalPending || error.oauthError?.error == .accessDenied
                || error.oauthError?.error == .expiredToken
            revoked = false
            guard neverActive || error.oauthError?.error == .notFound else {
                if error.code == .transportFailed {
                    throw KeyAuthError(
                        error.code, error.message + "; use `keyauth reset --local-only` if the server is gone",
                        underlying: error.underlying)
                }
                throw error
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
}
