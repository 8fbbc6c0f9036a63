import KeyAuth

/// `keyauth pin change`: the device key protected by a new PIN, without registering again.
///
/// A key file is encrypted again under the new PIN; a TPM key gets a new authorization value
/// from the TPM (`TPM2_ObjectChangeAuth`). Either way the public key and the key ID stay, so the
/// registration does too.
///
/// The current PIN goes through the same check as a login (``PINPresence``: up to three tries on
/// a terminal), so that this command is no cheaper a way to guess it: for a key file wrong ones
/// count towards the delay, for a TPM key each costs one count of the TPM's own lockout, as a
/// login with it would. The new PIN is asked only once the current one proved right.
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
        let files = try accounts.keyPairStore(for: name)
        guard let kind = files.storedKind else {
            throw KeyAuthError(
                .accountCorrupt,
                "account \(name) has no device key: run `keyauth reset --account \(name) --local-only`")
        }
        // Checked before any PIN is asked: the new key file is compared with it.
        guard SecureFile.exists(files.publicKeyPath) else {
            throw KeyAuthError(
                .accountCorrupt,
                "account \(name) has no public key file \(files.publicKeyPath), which the key is checked against: "
                    + "restore it, or run `keyauth reset --account \(name) --local-only` and register again")
        }
        let presence = try context.presence(
            kind: .pin, pamService: nil, pinFromStandardInput: options.pinFromStandardInput,
            keyDirectory: files.directory)
        guard let pinCheck = presence as? PINPresence else {
            throw KeyAuthError(.invalidArgument, "account \(name) has no PIN check")
        }
        let reason = "Current PIN of account \(name)"
        switch kind {
        case .file:
            let key = try await pinCheck.unlock(reason: reason) { (pin) throws(KeyAuthError) in
                try files.loadPrivateKey(pin: pin)
            }
            let newPIN = try await Self.newPIN(pinCheck, kind: kind, confirm: !options.pinFromStandardInput)
            try files.replacePIN(of: key, with: newPIN)
        case .tpm:
            // On the TPM that KEYAUTH_TPM_TCTI names, as a login signs there.
            let keys = try accounts.keyPairStore(for: name, keyStore: .tpm(context.tpmConnection()))
            let key = try await pinCheck.unlockCheckedHardwareKey(reason: reason) { (pin) throws(KeyAuthError) in
                let key = try keys.loadTPMKey(pin: pin)
                try key.checkPIN()
                return key
            }
            let newPIN = try await Self.newPIN(pinCheck, kind: kind, confirm: !options.pinFromStandardInput)
            try keys.replacePIN(of: key, with: newPIN)
        }
        context.io.printOutput("Changed the PIN of account \(name); the device stays registered.")
    }

    /// The new PIN; one that is too short, too long for a TPM key, or whose confirmation differs,
    /// is bad input (exit 64) once the prompts are used up.
    private static func newPIN(
        _ check: PINPresence, kind: KeyStore.Kind, confirm: Bool
    ) async throws(KeyAuthError) -> SecretBytes {
        do {
            return try await check.newPIN(
                minimumLength: kind.minimumPINLength, maximumBytes: kind.maximumPINBytes, confirm: confirm)
        } catch {
            guard error.code == .invalidArgument else { throw error }
            throw CommandParser.usage(error.message + " The PIN is unchanged.", .pin)
        }
    }
}
