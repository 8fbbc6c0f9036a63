import Foundation
import KeyAuth

/// An existing account opened for a command that uses its key: the account record, its key
/// store, a client for its server, and a token provider whose authenticator logs in (and polls
/// while the device waits for approval).
struct AccountSession: Sendable {
    let context: CommandContext
    let accounts: AccountStore
    let account: KeyAuthAccount
    let keys: KeyPairStore
    let client: KeyAuthClient
    let authenticator: Authenticator<AccessToken>
    let provider: AccessTokenProvider
    let progress: ProgressReporter
    /// The device key's proof builder, once a login bound its token or a command unlocked the
    /// key, so that one command asks for the PIN once.
    let proofKey: ProofKey

    /// When the command's logins bind their token to the device key: only when the server
    /// requires it. The stored token is the one `keyauth token` prints for scripts, so it stays
    /// a Bearer token where the server allows one; a bound one would also make every `devices`
    /// command unlock the key (and ask for a PIN) to sign its proofs.
    static let dpopPolicy = KeyAuthClient.DPoPPolicy.whenRequired

    /// Opens the account a command names (or the default one).
    ///
    /// - Parameter extraClaims: claims every login assertion of the session adds (the host login
    ///   statement of `keyauth-pam-helper`).
    /// - Throws: `.accountNotFound`, `.accountCorrupt` (also when the key file is missing),
    ///   `.invalidArgument` for several accounts without a default, `.usage` for a malformed
    ///   `KEYAUTH_TPM_TCTI` with a TPM key, presence errors.
    static func open(
        context: CommandContext, account explicitName: String?, pinFromStandardInput: Bool,
        waitForApproval: Bool, extraClaims: JWTClaims = JWTClaims()
    ) throws(KeyAuthError) -> AccountSession {
        let accounts = try context.accountStore()
        let name = try resolve(accounts, explicitName)
        return try open(
            context: context, checked: try accounts.load(name), pinFromStandardInput: pinFromStandardInput,
            waitForApproval: waitForApproval, extraClaims: extraClaims)
    }

    /// Opens `account`, the record as the caller already read and checked it, without reading
    /// the account file again: its server, presence check and audience are the ones checked.
    /// `keyauth-pam-helper` needs this, since the file is in the user's home, where anything
    /// running as the user can replace it between a check and a second read (a copy naming the
    /// user's own server, which would say yes to anything, renamed in after root's check passed).
    ///
    /// - Throws: as ``open(context:account:pinFromStandardInput:waitForApproval:extraClaims:)``.
    static func open(
        context: CommandContext, checked account: KeyAuthAccount, pinFromStandardInput: Bool,
        waitForApproval: Bool, extraClaims: JWTClaims = JWTClaims()
    ) throws(KeyAuthError) -> AccountSession {
        let accounts = try context.accountStore()
        let name = account.name
        let files = try accounts.keyPairStore(for: name)
        guard let kind = files.storedKind else {
            let hint =
                account.status == .registering
                ? "its registration did not finish"
                : "its device key \(account.keyStore == .tpm ? files.tpmKeyPath : files.privateKeyPath) is missing"
            throw KeyAuthError(
                .accountCorrupt,
                "account \(name) cannot log in: \(hint); run `keyauth reset --account \(name) --local-only` and register again"
            )
        }
        // A TPM key signs on the TPM that KEYAUTH_TPM_TCTI names (the kernel's by default).
        let keys = kind == .tpm ? try accounts.keyPairStore(for: name, keyStore: .tpm(context.tpmConnection())) : files
        // Without a terminal the check fails only when the key is used: a stored token needs no PIN.
        let checked: any PresenceCheck
        do {
            checked = try context.presence(
                kind: account.presence, pamService: account.pamService, pinFromStandardInput: pinFromStandardInput,
                keyDirectory: keys.directory)
        } catch {
            guard error.code == .presenceUnavailable else { throw error }
            checked = UnavailablePresence(
                kind: account.presence,
                reason: AgentReport.explainingLock(error, account: name, environment: context.io.environment))
        }
        let client: KeyAuthClient
        do {
            client = try context.client(for: account.serverURL, insecureHTTP: account.insecureHTTP)
        } catch {
            // An account registered before plain http needed --insecure-http: say how to go on.
            guard (try? KeyAuthClient.normalizedServerURL(account.serverURL, allowInsecureHTTP: true)) != nil else {
                throw error
            }
            throw KeyAuthError(
                .invalidArgument,
                "account \(name) uses plain http:// to a host that is not loopback, where anyone on the path "
                    + "can read its access tokens; register again with an https:// server URL, or with "
                    + "--insecure-http to accept that risk", underlying: error)
        }
        let progress = ProgressReporter(io: context.io, user: account.user, showsApprovalLine: waitForApproval)
        let proofKey = ProofKey()
        let presence = StatedPresence(checked)
        var hooks = client.authenticatorHooks(
            enrollment: nil, onApprovalPending: { keyID in progress.approvalNeeded(keyID: keyID) },
            dpop: Self.dpopPolicy,
            onProofKey: { proofKey.set($0) })
        hooks.jwtPayload = {
            var claims = presence.claims(keyStore: kind)
            claims.merge(extraClaims)
            return claims
        }
        var configuration = Authenticator<AccessToken>.Configuration(
            audience: account.issuer, reason: "Log in to \(account.serverURL) as \(account.user)")
        configuration.waitForApproval = waitForApproval
        configuration.pollInterval = context.io.pollInterval
        configuration.useKeyAgent(account: name, environment: context.io.environment)
        let authenticator = Authenticator(store: keys, presence: presence, configuration: configuration, hooks: hooks)
        let provider = AccessTokenProvider(
            account: name, credentials: accounts.credentials, authenticator: authenticator)
        return AccountSession(
            context: context, accounts: accounts, account: account, keys: keys, client: client,
            authenticator: authenticator, provider: provider, progress: progress, proofKey: proofKey)
    }

    /// Resolves the account name; a malformed `--account` is a usage error.
    static func resolve(_ accounts: AccountStore, _ explicitName: String?) throws(KeyAuthError) -> String {
        do {
            return try accounts.resolve(explicitName)
        } catch {
            guard error.code == .invalidArgument else { throw error }
            throw KeyAuthError(.usage, error.message)
        }
    }

    /// Logs in (presence check included), stores the token, and marks the account active.
    ///
    /// - Throws: the authenticator's errors; `.approvalPending` with the approve command when
    ///   `--no-wait` was given and the device still waits.
    func login() async throws(KeyAuthError) -> AccessToken {
        let token: AccessToken
        do {
            // Discovery first (the login reads it anyway, once): a server that cannot be reached
            // fails here, before anyone types a PIN for nothing.
            _ = try await client.shouldBindTokens(Self.dpopPolicy)
            token = try await progress.run(authenticator) { () throws(KeyAuthError) in try await provider.login() }
        } catch {
            if error.oauthError?.refusesDeviceKey == true { recordRefusal() }
            throw explained(error)
        }
        if account.status != .active || account.refusedAt != nil {
            var updated = account
            updated.status = .active
            updated.refusedAt = nil
            try accounts.save(updated)
        }
        return token
    }

    /// Remembers in the account that the server refused its key now, for `status` and `reset`,
    /// and forgets the stored token: the server refuses the tokens of a device it refuses, so
    /// `keyauth token` would otherwise go on printing one that no request can use.
    ///
    /// Best effort: the refusal itself is what the person must see, not a failure to record it.
    private func recordRefusal() {
        var updated = account
        updated.refusedAt = Date()
        try? accounts.save(updated)
        try? provider.credentials.deleteToken(account: account.name)
    }

    /// A valid token: the stored one, or a new login.
    func accessToken() async throws(KeyAuthError) -> AccessToken {
        if let token = try provider.storedToken() { return token }
        return try await login()
    }

    /// Runs `body` with a valid token, and for a DPoP-bound token the device key's proof builder
    /// (``withProofs(_:)``, which asks again for a TPM PIN refused at the first proof); when a
    /// stored token is refused (`invalid_token`: the server restarted with new keys, the clock
    /// jumped, the server now requires DPoP) it logs in once more and retries.
    func withAccessToken<Value>(
        _ body: (AccessToken, DPoPProofBuilder?) async throws(KeyAuthError) -> Value
    ) async throws(KeyAuthError) -> Value {
        func run(_ token: AccessToken) async throws(KeyAuthError) -> Value {
            guard token.tokenType == TokenResponse.dpop else { return try await body(token, nil) }
            return try await withProofs { (proofs) throws(KeyAuthError) in try await body(token, proofs) }
        }
        guard let stored = try provider.storedToken() else { return try await run(try await login()) }
        do {
            return try await run(stored)
        } catch {
            guard error.oauthError?.error == .invalidToken else { throw error }
            try provider.credentials.deleteToken(account: account.name)
            return try await run(try await login())
        }
    }

    /// Adds what to do next to the errors that leave the account unable to log in.
    private func explained(_ error: KeyAuthError) -> KeyAuthError {
        let name = account.name
        if error.code == .cancelled, progress.sawApprovalPending {
            return KeyAuthError(
                .cancelled,
                "stopped waiting for approval; run `keyauth login --account \(name)` once it is approved")
        }
        if error.code == .approvalPending {
            let keyID = (try? keys.loadPublicKey().fingerprint) ?? account.keyID ?? "KID"
            return KeyAuthError(
                .approvalPending,
                ProgressReporter.approvalHint(
                    user: account.user, keyID: keyID, lead: "this device still waits for approval"),
                underlying: error.underlying)
        }
        // Denied (a 400) or never approved in time: the device will never log in. A 403
        // `access_denied` (a device policy it does not meet) refuses it for now, while the
        // server keeps it active: deleting the key here would leave it so, with nobody to revoke it.
        guard let oauth = error.oauthError else { return error }
        if oauth.endsRegistration {
            return KeyAuthError(
                error.code,
                error.message + "; to start again, run `keyauth reset --account \(name) --local-only`, then "
                    + "`keyauth register --server \(account.serverURL) --user \(account.user)`",
                underlying: error.underlying)
        }
        if oauth.refusesDeviceKey {
            return KeyAuthError(
                error.code,
                error.message + ": this device was revoked, or is unknown to this server; run "
                    + "`keyauth reset --account \(name)` to delete it here, then register again",
                underlying: error.underlying)
        }
        return error
    }
}
