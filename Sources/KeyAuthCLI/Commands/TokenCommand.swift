import KeyAuth

/// `keyauth token`: prints a valid access token, logging in again only when the stored one
/// expires within 30 seconds.
///
/// It never waits for approval: a script asking for a token should fail at once (exit 77, with
/// the approve command in the message) rather than hang; `keyauth login` is the command that waits.
struct TokenCommand {
    let context: CommandContext
    let options: TokenOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let token = try await session.accessToken()
        context.io.printOutput(token.value)
    }
}
