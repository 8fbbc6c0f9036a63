import KeyAuth

/// Signs what a device approves: a fresh device assertion with the claims that name what is
/// approved and `amr`, made by the same authenticator flow as a login (presence check, key
/// unlocked, signed), so that an approval always costs the device's presence check.
struct ApprovalSigner {
    let session: AccountSession

    /// The device's statement of how it checked the user, in RFC 8176's values: where the key is
    /// (`hwk` in a TPM, `swk` a file) and the presence check (`pin`, or `user` for a PAM
    /// conversation).
    var authenticationMethods: [String] {
        StatedPresence.methods(keyStore: session.account.keyStore, presence: session.account.presence)
    }

    /// An assertion carrying `claims` and `amr`, whose session is the assertion itself.
    ///
    /// - Parameters:
    ///   - reason: what the presence check says it is for.
    ///   - requiringPresence: whether the server takes the statement only with a presence check
    ///     (approving a device, making recovery codes): a device registered with `--presence
    ///     none` is told at once instead of after a round trip.
    ///   - purpose: what needs the presence check, for that message.
    /// - Throws: `.presenceUnavailable` (exit 77) for such a device; the presence check's and the
    ///   key's errors.
    func sign(
        _ claims: JWTClaims, reason: String, requiringPresence: Bool = false,
        purpose: String = "approving a device needs one: approve it from a device with a PIN or PAM, or with the "
            + "account page's Approve"
    ) async throws(KeyAuthError) -> String {
        if requiringPresence, session.account.presence == .none {
            throw KeyAuthError(
                .presenceUnavailable,
                "this device was registered without a presence check (--presence none), and \(purpose)")
        }
        var payload = claims
        payload.set("amr", strings: authenticationMethods)
        let signed = payload
        let hooks = AuthenticatorHooks<String>(
            registerPublicKey: { _, _ in
                throw KeyAuthError(.accountCorrupt, "the account has no device key to approve with")
            },
            jwtPayload: { signed }, authenticate: { assertion in assertion })
        let configuration = Authenticator<String>.Configuration(audience: session.account.issuer, reason: reason)
        let signer = Authenticator(
            store: session.keys, presence: session.authenticator.presence, configuration: configuration, hooks: hooks)
        return try await signer.login()
    }
}
