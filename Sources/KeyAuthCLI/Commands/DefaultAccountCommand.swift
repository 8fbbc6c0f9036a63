import KeyAuth

/// `keyauth default [ACCOUNT]`: the account commands use without `--account`.
///
/// Registering sets the first account as the default; with several, this is how a person
/// chooses another without editing the `default` file.
struct DefaultAccountCommand {
    let context: CommandContext
    let account: String?

    func run() throws(KeyAuthError) {
        let accounts = try context.accountStore()
        guard let account else {
            guard let name = try accounts.defaultAccountName(), accounts.exists(name) else {
                let names = accounts.accountNames()
                if names.count == 1, let only = names.first {
                    context.io.printOutput("\(only) (the only account)")
                    return
                }
                let hint =
                    names.isEmpty
                    ? "there are no accounts yet"
                    : "choose one of \(names.joined(separator: ", ")) with `keyauth default ACCOUNT`"
                context.io.printOutput("No default account: \(hint).")
                return
            }
            context.io.printOutput(name)
            return
        }
        let name = try AccountSession.resolve(accounts, account)
        try accounts.setDefaultAccount(name)
        context.io.printOutput("The default account is now \(name).")
    }
}
