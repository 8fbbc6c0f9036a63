import KeyAuth

/// `keyauth login`: presence check, assertion, token stored for the account.
struct LoginCommand {
    let context: CommandContext
    let options: LoginOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: !options.noWait)
        let token = try await session.login()
        context.io.printOutput(
            "Logged in to \(session.account.serverURL) as \(session.account.user) (account \(session.account.name)); "
                + "the token is valid until \(Formatting.timestamp(token.expiresAt)).")
    }
}
