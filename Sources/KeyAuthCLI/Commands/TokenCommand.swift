import KeyAuth

/// `keyauth token`: prints a valid access token, logging in again only when the stored one
/// expires within 30 seconds.
///
/// For scripts, the token is a Bearer token (`curl -H "Authorization: Bearer $(keyauth token)"`)
/// wherever the server allows one; a server that requires DPoP gets a token bound to the device
/// key, and the command says on standard error how to send it with `keyauth proof`.
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
        if token.tokenType == TokenResponse.dpop {
            context.io.printError(
                "keyauth: the server requires DPoP: this token is bound to the device key; send it as "
                    + "`Authorization: DPoP TOKEN` with `DPoP: $(keyauth proof METHOD URL)` on each request")
        }
    }
}
