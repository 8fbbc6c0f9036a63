import KeyAuth

/// `keyauth pin change`: the key file encrypted under a new PIN, without registering again.
///
/// The current PIN goes through the same check as a login (``PINPresence``: up to three tries,
/// wrong ones counted towards the delay), so that this command is no cheaper a way to guess it.
struct PINChangeCommand {
    let context: CommandContext
    let options: PINChangeOptions

    func run() async throws(KeyAuthError) {
        let accounts = try context.accountStore()
        let name = try AccountSession.resolve(accounts, options.account)
        let account = try accounts.load(name)
        guard account.presence == .pin else {
            throw KeyAuthError(
                .invalidArgument,
                "account \(name) has no PIN: its presence check is \(account.presence.rawValue)")
        }
        let keys = try accounts.keyPairStore(for: name)
        switch keys.storedKind {
        case .file?:
            break
        case .tpm?:
            throw KeyAuthError(
                .invalidArgument,
                "account \(name) has a TPM key, whose PIN is its TPM authorization value; this version cannot "
                    + "change it: run `keyauth reset --account \(name)` and register again to choose a new PIN")
        case nil:
            throw KeyAuthError(
                .accountCorrupt,
                "account \(name) has no device key: run `keyauth reset --account \(name) --local-only`")
        }
        let presence = try context.presence(
            kind: .pin, pamService: nil, pinFromStandardInput: options.pinFromStandardInput,
            keyDirectory: keys.directory)
        guard let pinCheck = presence as? PINPresence else {
            throw KeyAuthError(.invalidArgument, "account \(name) has no PIN check")
        }
        let key = try await pinCheck.unlock(reason: "Current PIN of account \(name)") {
            (pin) throws(KeyAuthError) in try keys.loadPrivateKey(pin: pin)
        }
        let newPIN = try await pinCheck.newPIN(
            minimumLength: KeyPairStore.minimumPINLength, confirm: !options.pinFromStandardInput)
        try keys.replacePIN(of: key, with: newPIN)
        context.io.printOutput("Changed the PIN of account \(name); the device stays registered.")
    }
}
