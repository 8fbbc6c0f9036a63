import KeyAuth

/// `keyauth proof METHOD URL`: prints a DPoP proof (RFC 9449) for one request, signed with the
/// device key and bound (`ath`) to the account's stored DPoP-bound token, for a script that sends
/// `Authorization: DPoP $(keyauth token)` and `DPoP: $(keyauth proof ...)`.
///
/// Signing needs the private key, so a PIN-protected key asks for its PIN. The proof is bound to
/// the token `keyauth token` prints: the stored one, or, when none is valid, one from a new login
/// (which then stores it), so that the two commands on one curl line always agree.
struct ProofCommand {
    let context: CommandContext
    let options: ProofOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let token = try await session.accessToken()
        let bound = token.tokenType == TokenResponse.dpop ? token.value : nil
        let proof = try await session.withProofs { (proofs) throws(KeyAuthError) in
            try proofs.proof(method: options.method, url: options.url, accessToken: bound, nonce: options.nonce)
        }
        context.io.printOutput(proof)
    }
}
