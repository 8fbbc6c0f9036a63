import KeyAuth

/// `keyauth attest`: proves again to the server that this device's key is in a TPM (PROTOCOL.md
/// section 4, "Attest a registered device"), so that its tier rises without a new registration:
/// after the operator configured the TPM maker's root (`--tpm-ca`), or for a device registered
/// before attestation, when a `--device-policy` now refuses its login.
///
/// The TPM certifies the key over the server's nonce and answers the server's credential
/// challenge, as at an attested registration; each request carries a fresh assertion of the
/// device key, so the PIN of a PIN-protected key is asked once. A key file has nothing to
/// attest: that is said before anything is sent.
struct AttestCommand {
    let context: CommandContext
    let options: AttestOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let account = session.account
        let keys = session.keys
        guard keys.storedKind == .tpm else {
            throw KeyAuthError(
                .invalidArgument,
                "account \(account.name)'s device key is a key file, not a key in a TPM: there is nothing to attest; "
                    + "a TPM-held key needs a new registration (`keyauth reset --account \(account.name)`, then "
                    + "`keyauth register --key-store tpm`)")
        }
        let key = try await session.authenticator.presence.unlockHardwareKey(
            reason: "Attest the TPM of account \(account.name) to \(account.serverURL)"
        ) { (pin) throws(KeyAuthError) in try keys.loadKey(pin: pin) }
        guard let tpmKey = key.signer as? TPMSigningKey else {
            throw KeyAuthError(.invalidArgument, "account \(account.name)'s device key is not held by a TPM")
        }
        let builder = JWTBuilder(key: key, audience: account.issuer)
        let answer = try await session.client.attestDevice(key: tpmKey) { () throws(KeyAuthError) in
            try await BlockingWork.run { () throws(KeyAuthError) in try builder.sign() }
        }
        if account.tier != answer.tier {
            var updated = account
            updated.tier = answer.tier
            try session.accounts.save(updated)
        }
        context.io.printOutput(Self.text(answer, account: account.name))
    }

    /// What the server now records, and why the tier is not higher when it is not `attested`.
    static func text(_ answer: DeviceAttestationResponse, account: String) -> String {
        let problem = answer.endorsementProblem.map { " (\(Formatting.printable($0)))" } ?? ""
        if answer.tier != answer.previousTier {
            return "Attested account \(account): tier \(answer.tier) (was \(answer.previousTier))\(problem)."
        }
        if answer.attestationTier.rank < answer.tier.rank {
            return "Attested account \(account): the server keeps tier \(answer.tier); this attestation showed "
                + "\(answer.attestationTier)\(problem)."
        }
        return "Attested account \(account): tier \(answer.tier), unchanged\(problem)."
    }
}
