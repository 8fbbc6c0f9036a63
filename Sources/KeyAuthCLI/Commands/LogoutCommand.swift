import KeyAuth

/// `keyauth logout`: forgets the stored access token and nothing else.
///
/// The device key and its registration stay, so that the next `keyauth login` needs only the
/// presence check; `keyauth reset` is the command that gives the device up.
struct LogoutCommand {
    let context: CommandContext
    let options: LogoutOptions

    func run() throws(KeyAuthError) {
        let accounts = try context.accountStore()
        let name = try AccountSession.resolve(accounts, options.account)
        let account = try accounts.load(name)
        // A token file that cannot be read (too open, damaged) is deleted all the same: it is the
        // one file here that may have leaked, and forgetting it needs no reading.
        let hadToken: Bool
        do {
            hadToken = try accounts.credentials.loadToken(account: name) != nil
        } catch {
            hadToken = true
        }
        try accounts.credentials.deleteToken(account: name)
        let what = hadToken ? "Deleted the stored access token" : "No access token was stored"
        context.io.printOutput(
            "\(what) of account \(name) (\(account.user) at \(account.serverURL)); the device key and its "
                + "registration are kept: `keyauth login --account \(name)` signs in again.")
    }
}
