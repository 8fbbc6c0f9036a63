import KeyAuth

/// `keyauth recovery-codes`: after this device's presence check, asks the server for a new set of
/// one-time recovery codes for the account's user and prints them, the only time they are shown.
///
/// The server takes the request only with a fresh assertion of this device naming the user,
/// made after the presence check (as a device approval is), since a code enrols a device without
/// anyone's approval.
struct RecoveryCodesCommand {
    let context: CommandContext
    let options: RecoveryCodesOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let user = session.account.user
        var claims = JWTClaims()
        claims.set(AuthenticationMethod.recoveryCodesClaim, string: user)
        let assertion = try await ApprovalSigner(session: session).sign(
            claims, reason: "Make new recovery codes for \(user) (the old ones stop working)", requiringPresence: true,
            purpose: "making recovery codes needs one: make them from a device with a PIN or PAM, or on the "
                + "account page")
        let client = session.client
        let codes = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.makeRecoveryCodes(assertion: assertion, accessToken: token, proofs: proofs)
        }
        context.io.printOutput(Self.text(codes, user: user, server: session.account.serverURL))
    }

    /// The codes with what they are for; printed once, never stored here.
    static func text(_ codes: [String], user: String, server: String) -> String {
        var lines = [
            "Recovery codes for \(user) at \(server) (each works once; the previous ones no longer work):", "",
        ]
        lines += codes.map { "  " + Formatting.printable($0) }
        lines += [
            "",
            "Keep them somewhere safe, away from this device: they are shown only now. When every device is lost,",
            "`keyauth register --server \(server) --user \(user) --recovery-code -` enrols a new one with a code.",
        ]
        return lines.joined(separator: "\n")
    }
}
