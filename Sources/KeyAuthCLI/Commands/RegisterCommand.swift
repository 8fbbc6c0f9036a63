import Foundation
import KeyAuth
import Synchronization

/// `keyauth register`: presence check, key generation, registration with proof of possession,
/// then login; waits for approval when the server answers pending (unless `--no-wait`, which
/// then ends with exit status 75).
struct RegisterCommand {
    let context: CommandContext
    let options: RegisterOptions

    /// Where the new key goes, decided before anything is asked or sent.
    struct KeyStoreChoice {
        let keyStore: KeyStore
        let kind: KeyStore.Kind
        /// The key size: `--bits`, or the store's default.
        let bits: Int
        /// The line that tells the person, such as `Key store: TPM (IBM)`.
        let line: String
    }

    /// The account name made of the user and the server when `--account` is not given; one
    /// longer than an account name may be is a usage error that says how to name it, not the
    /// rule of a name the user never typed.
    private static func defaultAccountName(_ options: RegisterOptions) throws(KeyAuthError) -> String {
        let name = AccountStore.defaultAccountName(user: options.user, serverURL: options.serverURL)
        guard AccountStore.isValidAccountName(name) else {
            throw CommandParser.usage(
                "the account name made of the user and the server (USER@HOST:PORT) would be "
                    + "\(name.unicodeScalars.count) characters, longer than 128; name the account with --account NAME. "
                    + "Nothing was registered.", .register)
        }
        return name
    }

    /// - Returns: ``ExitCode/success``, or ``ExitCode/temporaryFailure`` when `--no-wait` leaves
    ///   the device registered and waiting for approval.
    func run() async throws(KeyAuthError) -> ExitCode {
        let io = context.io
        let accounts = try context.accountStore()
        let name: String
        if let account = options.account {
            name = account
        } else {
            name = try Self.defaultAccountName(options)
        }
        if accounts.isBeingRemoved(name) {
            // An earlier `keyauth reset` revoked the device, or was told not to ask the server,
            // and stopped before it deleted everything here. Its marker must not outlive it:
            // the next reset would take this registration's key for that removal's leftover and
            // delete it without revoking it.
            try accounts.remove(name)
            io.printOutput("Finished deleting account \(name) here, which an earlier `keyauth reset` began.")
        }
        // An unconfirmed registration's key is sent again; any other key stays as it is.
        let resumed = try accounts.keyPairStore(for: name).hasKey ? try unconfirmedRegistration(accounts, name) : nil
        let deviceName = resumed?.deviceName ?? options.deviceName ?? Self.deviceName(fromHost: io.hostName)
        let choice: KeyStoreChoice
        if let resumed {
            choice = try storedKeyChoice(resumed)
        } else {
            choice = try chooseKeyStore(accounts)
        }
        // Before the PIN prompt: a TPM key's PIN may be shorter than a key file's.
        io.printOutput(choice.line)
        let keys = try accounts.keyPairStore(for: name, keyStore: choice.keyStore)
        // The code comes first on standard input, before the PIN that --pin-stdin reads next.
        let enrollmentCode =
            options.enrollmentCodeFromStandardInput
            ? try await Self.code(fromDescriptor: io.standardInput, option: "--enrollment-code")
            : options.enrollmentCode
        let recoveryCode =
            options.recoveryCodeFromStandardInput
            ? try await Self.code(fromDescriptor: io.standardInput, option: "--recovery-code") : options.recoveryCode
        let presence = StatedPresence(
            try context.presence(
                kind: resumed?.presence ?? options.presence, pamService: resumed?.pamService ?? options.pamService,
                pinFromStandardInput: options.pinFromStandardInput, keyDirectory: keys.directory))
        let client = try context.client(for: options.serverURL, insecureHTTP: options.insecureHTTP)
        let issuer = try await Self.issuer(of: client)
        try Self.refuseSameServer(accounts, issuer: issuer, user: options.user, except: name, url: options.serverURL)

        let initial =
            resumed
            ?? KeyAuthAccount(
                name: name, serverURL: options.serverURL, issuer: issuer, user: options.user, deviceName: deviceName,
                presence: options.presence, keyStore: choice.kind,
                pamService: options.presence == .pam ? options.pamService : nil,
                insecureHTTP: options.insecureHTTP)
        // A new registration's account drops the token of the one it replaces (whose key was
        // lost): kept, `keyauth token` would print it, and `devices` send it, to this server.
        if resumed == nil { try accounts.credentials.deleteToken(account: name) }
        try accounts.save(initial)
        let record = Mutex(initial)
        // The key ID the server answered with, even when the account could not record it.
        let serverKeyID = Mutex<String?>(nil)
        let progress = ProgressReporter(io: io, user: options.user, waitsForApproval: !options.noWait)
        var enrollment = DeviceEnrollment(
            user: options.user, deviceName: deviceName, enrollmentCode: enrollmentCode)
        enrollment.recoveryCode = recoveryCode
        // What the key is made with, stated now: a PIN put on a key made without one later, by
        // anything running as the user, must not make it pass where a PIN is the secret (sudo).
        enrollment.keyProtection = (resumed?.presence ?? options.presence) == .pin ? .pin : KeyProtection.withoutPIN
        var hooks = client.authenticatorHooks(
            enrollment: enrollment,
            onRegistered: { registration in
                serverKeyID.withLock { $0 = registration.keyID }
                var account = record.withLock { $0 }
                account.keyID = registration.keyID
                account.tier = registration.tier
                account.status = registration.status == .active ? .active : .pending
                // A refusal recorded by a login before the server stored this key is over: left
                // in place, `reset` would take it for a key the server refuses, and delete the
                // key here without revoking the device.
                account.refusedAt = nil
                try accounts.save(account)
                // Only what is on disk: a failed save leaves the record `registering`, as the file.
                record.withLock { $0 = account }
                if registration.status == .pending {
                    progress.approvalNeeded(
                        keyID: registration.keyID, deadline: Date() + ProgressReporter.pendingRegistrationLifetime)
                }
            },
            onApprovalPending: { keyID in progress.approvalNeeded(keyID: keyID) }, dpop: AccountSession.dpopPolicy)
        let keyKind = choice.kind
        hooks.jwtPayload = { presence.claims(keyStore: keyKind) }
        var configuration = Authenticator<AccessToken>.Configuration(
            audience: issuer, keyBits: choice.bits, reason: "Register this device with \(options.serverURL)")
        configuration.waitForApproval = !options.noWait
        configuration.confirmNewPIN = !options.pinFromStandardInput
        configuration.pollInterval = io.pollInterval
        configuration.registerStoredKey = resumed != nil
        let authenticator = Authenticator(store: keys, presence: presence, configuration: configuration, hooks: hooks)
        let provider = AccessTokenProvider(
            account: name, credentials: accounts.credentials, authenticator: authenticator)

        let token: AccessToken
        do {
            let newKey = "a \(choice.bits)-bit RSA key" + (choice.kind == .tpm ? " in the TPM" : "")
            token = try await progress.run(authenticator, newKey: newKey) { () throws(KeyAuthError) in
                try await provider.login()
            }
        } catch {
            let account = record.withLock { $0 }
            if error.code == .approvalPending, options.noWait, keys.hasKey {
                try makeDefaultIfNeeded(accounts, name)
                io.printOutput(
                    "Registered this device as \(account.keyID ?? "?") for \(options.user) at \(options.serverURL) "
                        + "(account \(name)); it waits for approval (short code "
                        + "\(DeviceMatch.shortCode(account.keyID ?? "")); then run `keyauth login --account \(name)`).")
                return .temporaryFailure
            }
            if error.code == .cancelled, progress.sawApprovalPending, keys.hasKey {
                try makeDefaultIfNeeded(accounts, name)
                throw KeyAuthError(
                    .cancelled,
                    "stopped waiting for approval; this device stays registered as pending: "
                        + "run `keyauth login --account \(name)` once it is approved")
            }
            // A key the server never accepted, or whose registration was denied or expired, is of
            // no use: leave nothing behind, so that the next attempt starts clean. Only the
            // server's own body says so (a proxy's 403 page does not). Once the server has stored
            // the device (this attempt's answer, or an earlier one for a key sent again), only
            // the end of its registration does: a 403 (a device policy at the login) or a 429
            // refuses a request, and the device may stay active there.
            let stated = error.oauthError.flatMap { $0.isFromBody ? $0.error : nil }
            let ended = error.oauthError?.endsRegistration == true || error.code == .registrationEnded
            let neverStored = resumed == nil && serverKeyID.withLock({ $0 }) == nil
            if !keys.hasKey || ended || (neverStored && stated == .accessDenied) { try? accounts.remove(name) }
            if ended {
                throw KeyAuthError(
                    error.code,
                    error.message + "; nothing is kept here: run the same `keyauth register` to start again",
                    underlying: error.underlying)
            }
            if resumed == nil, stated == .accessDenied, account.keyID == nil {
                throw recoveryCode == nil
                    ? Self.explainedRefusal(error, user: options.user, hadCode: enrollmentCode != nil)
                    : Self.explainedRecoveryRefusal(error, user: options.user)
            }
            // Before a key was made: a new PIN that breaks the rules, or a device name that is
            // not one, is bad input, as at `keyauth pin change`.
            if error.code == .invalidArgument, !keys.hasKey {
                throw CommandParser.usage(error.message + " Nothing was registered.", .register)
            }
            if keys.hasKey, account.status == .registering, let keyID = serverKeyID.withLock({ $0 }) {
                throw Self.unrecordedRegistration(error, keyID: keyID, account: name)
            }
            // A key sent again and refused (a rate limit, a device policy, a proxy): the first
            // attempt may still have been stored, so the key stays for the next attempt.
            if resumed != nil, keys.hasKey, account.status == .registering, error.oauthError != nil {
                throw KeyAuthError(
                    error.code,
                    error.message + "; the key and account \(name) are kept, and running the same `keyauth "
                        + "register` again finishes the registration with the same key",
                    underlying: error.underlying, retryAfter: error.retryAfter)
            }
            // The authenticator kept the key: no refusal came, so the server may hold the device.
            if keys.hasKey, account.status == .registering,
                error.code == .transportFailed || error.code == .serverRejected
            {
                throw KeyAuthError(
                    error.code,
                    error.message + "; the server's answer to the registration was lost, and it may have stored "
                        + "this device: the key and account \(name) are kept, and running the same `keyauth "
                        + "register` again finishes the registration with the same key",
                    underlying: error.underlying)
            }
            throw error
        }
        var account = record.withLock { $0 }
        // The device is registered and logged in: a record that cannot be written now (a full
        // disk) is a warning naming the command that writes it later, not a failure that the
        // same `keyauth register` could not repair.
        if account.status != .active {
            account.status = .active
            do {
                try accounts.save(account)
            } catch {
                io.printError(
                    "keyauth: warning: \(error.message); account \(name) is still recorded as pending here, "
                        + "which the next `keyauth login --account \(name)` corrects")
            }
        }
        do {
            try makeDefaultIfNeeded(accounts, name)
        } catch {
            io.printError(
                "keyauth: warning: \(error.message); run `keyauth default \(name)` to make it the default account")
        }
        io.printOutput(
            "Registered this device as \(account.keyID ?? "?") for \(options.user) at \(options.serverURL) "
                + "(account \(name)); logged in until \(Formatting.timestamp(token.expiresAt)).")
        return .success
    }

    /// `--key-store`: `file` as asked; `tpm` when the TPM answers (exit 69 naming the TCTI when
    /// not); `auto` the TPM when one answers and can make keys, a key file otherwise. For a TPM
    /// key, a `--bits` the TPM cannot make is a usage error. Why `auto` found no TPM is told the
    /// first time only; the home remembers it.
    private func chooseKeyStore(_ accounts: AccountStore) throws(KeyAuthError) -> KeyStoreChoice {
        let fileBits = options.bits ?? 3072
        if options.keyStore == .file {
            return KeyStoreChoice(keyStore: .file, kind: .file, bits: fileBits, line: "Key store: file")
        }
        let tpm = try context.tpmConnection()
        let info: TPMInfo
        do {
            info = try tpm.infoForNewKeys()
        } catch {
            guard options.keyStore == .tpm else {
                let reason = accounts.isFirstNoticeOfMissingTPM(tcti: tpm.tcti) ? error.message : "no TPM"
                return KeyStoreChoice(keyStore: .file, kind: .file, bits: fileBits, line: "Key store: file (\(reason))")
            }
            throw error
        }
        accounts.forgetMissingTPM()
        if let bits = options.bits, !info.rsaKeySizes.contains(bits) {
            let sizes = info.rsaKeySizes.map(String.init).joined(separator: " or ")
            throw CommandParser.usage(
                "--bits \(bits): the TPM at \(tpm.tcti) (\(info.manufacturer)) makes RSA keys of \(sizes) bits "
                    + "(--key-store file makes a key file of any size)", .register)
        }
        return KeyStoreChoice(
            keyStore: .tpm(tpm), kind: .tpm, bits: options.bits ?? info.preferredRSAKeySize,
            line: "Key store: TPM (\(info.manufacturer))")
    }

    /// The account of a registration whose answer was lost, for `keyauth register` run again
    /// with the same server and user: its key is sent again, and the server answers a key it
    /// already holds for the user with its record, without using an enrollment code twice.
    ///
    /// - Throws: `.keyExists` for an account whose registration was confirmed, or for another
    ///   server or user (which a new key, not this one, would need).
    private func unconfirmedRegistration(_ accounts: AccountStore, _ name: String) throws(KeyAuthError)
        -> KeyAuthAccount
    {
        guard let account = try? accounts.load(name), account.status == .registering, account.keyID == nil,
            account.serverURL == options.serverURL, account.user == options.user
        else {
            throw KeyAuthError(
                .keyExists,
                "account \(name) already has a device key: use `keyauth login --account \(name)`, "
                    + "or `keyauth reset --account \(name)` to start over")
        }
        return account
    }

    /// Where an unconfirmed registration's key already is; `--key-store` and `--bits` no longer
    /// matter for it.
    private func storedKeyChoice(_ account: KeyAuthAccount) throws(KeyAuthError) -> KeyStoreChoice {
        let line = "Key store: \(account.keyStore == .tpm ? "TPM" : "file") (the key of the unfinished registration)"
        guard account.keyStore == .tpm else {
            return KeyStoreChoice(keyStore: .file, kind: .file, bits: options.bits ?? 3072, line: line)
        }
        return KeyStoreChoice(
            keyStore: .tpm(try context.tpmConnection()), kind: .tpm, bits: options.bits ?? 2048, line: line)
    }

    private func makeDefaultIfNeeded(_ accounts: AccountStore, _ name: String) throws(KeyAuthError) {
        if let current = try accounts.defaultAccountName(), accounts.exists(current) { return }
        try accounts.setDefaultAccount(name)
    }

    /// The issuer from discovery.
    ///
    /// Every keyauth server publishes its discovery document, so an answer without one means
    /// `--server` names something else (a web site, another port): the error says so and names
    /// the URL tried, before a key is made or anything is stored.
    static func issuer(of client: KeyAuthClient) async throws(KeyAuthError) -> String {
        try await client.discover().issuer
    }

    /// Refuses a second account for the same user on the same server reached under another name
    /// (`http://localhost:8088` and `http://127.0.0.1:8088`): the issuer from discovery, not the
    /// URL typed, says which server it is, and a second key there would be a second device of
    /// the same machine, pending or using an enrollment code for nothing.
    ///
    /// Only accounts with a device key count; a registration that never finished holds none.
    /// - Throws: `.keyExists` naming the account that already has a key there.
    static func refuseSameServer(
        _ accounts: AccountStore, issuer: String, user: String, except name: String, url: String
    ) throws(KeyAuthError) {
        for other in accounts.accountNames() where other != name {
            guard let account = try? accounts.load(other), account.issuer == issuer, account.user == user,
                (try? accounts.keyPairStore(for: other).hasKey) == true
            else { continue }
            throw KeyAuthError(
                .keyExists,
                "\(url) is the same server as account \(other) (issuer \(issuer)), where \(user) already has "
                    + "this device's key: use `keyauth login --account \(other)`, or `keyauth reset --account "
                    + "\(other)` to start over")
        }
    }

    /// The error for a registration the server recorded (it answered with `keyID`) that the
    /// account could not record (a full disk): the account still says `registering`, so the same
    /// `keyauth register` sends the same key again and the server answers with its record.
    static func unrecordedRegistration(_ error: KeyAuthError, keyID: String, account: String) -> KeyAuthError {
        KeyAuthError(
            error.code,
            error.message + "; the server registered this device as \(keyID), but account \(account) could not "
                + "record it: the key and account are kept, and running the same `keyauth register` again (once "
                + "the file can be written) finishes the registration with the same key",
            underlying: error.underlying)
    }

    /// A registration the server refused (`access_denied` before it recorded the key): by
    /// default a user's first device, and one whose devices are all gone, need a one-time code
    /// that only an administrator can make, so the message says whom to ask and for what.
    static func explainedRefusal(_ error: KeyAuthError, user: String, hadCode: Bool) -> KeyAuthError {
        let hint =
            hadCode
            ? "; ask an administrator for a new code (`keyauth-server enroll \(user)`)"
            : "; ask an administrator for an enrollment code (`keyauth-server enroll \(user)`) and pass it "
                + "with --enrollment-code"
        return KeyAuthError(error.code, error.message + hint, underlying: error.underlying)
    }

    /// A recovery code the server refused: the person holds nine more, or can ask an
    /// administrator, and the server's reason alone named neither.
    static func explainedRecoveryRefusal(_ error: KeyAuthError, user: String) -> KeyAuthError {
        KeyAuthError(
            error.code,
            error.message + " (each code works once, and a new set replaces the old one); try another of your "
                + "recovery codes, or ask an administrator for an enrollment code (`keyauth-server enroll \(user)`) "
                + "and pass it with --enrollment-code",
            underlying: error.underlying)
    }

    /// One line of standard input as the enrollment or recovery code (`--enrollment-code -`,
    /// `--recovery-code -`), so that the code never appears in the process list or the shell
    /// history.
    ///
    /// - Parameter option: the option that asked for it, for the error message.
    /// - Throws: `.usage` when input ends first or the line is blank.
    static func code(fromDescriptor descriptor: Int32, option: String) async throws(KeyAuthError) -> String {
        let line: SecretBytes
        do {
            line = try await BlockingThread.read(StandardInputSecretReader(fileDescriptor: descriptor), prompt: "")
        } catch {
            guard error.code == .cancelled else { throw error }
            throw CommandParser.usage("\(option) -: standard input ended before the code", .register)
        }
        let code = line.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }.trimmingCharacters(in: .whitespaces)
        guard !code.isEmpty else {
            throw CommandParser.usage("\(option) -: the first line of standard input is empty", .register)
        }
        return code
    }

    /// The host name when it is a valid device name (in NFC), else a neutral one.
    static func deviceName(fromHost host: String) -> String {
        (try? NameRule.deviceName.normalize(host)) ?? "keyauth-device"
    }
}
