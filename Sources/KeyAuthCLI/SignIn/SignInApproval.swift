import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The device's side of sign-in by approval (PROTOCOL.md section 8), shared by `keyauth approve`,
/// `keyauth deny` and `keyauth requests --watch`, and by whatever later asks a user to approve a
/// sign-in (an OpenID Connect `/authorize`): show the request, have the user type the code shown
/// on the other screen, check presence, sign an approval naming the request, and answer.
struct SignInApproval {
    let session: AccountSession
    /// Where the typed code comes from: standard input when it is not a terminal or when
    /// `--pin-stdin` is given (the code first, the PIN next), else the terminal.
    let codeReader: any SecretReader

    init(session: AccountSession, pinFromStandardInput: Bool) {
        self.session = session
        let io = session.context.io
        codeReader =
            pinFromStandardInput || isatty(io.standardInput) != 1
            ? StandardInputSecretReader(fileDescriptor: io.standardInput) : io.terminalReader
    }

    private var io: CommandIO { session.context.io }

    /// What the user chose for a request.
    enum Choice: Equatable {
        case approve, deny, skip
    }

    /// The lines that describe a request: who asks, the code, where from, when, until when.
    static func describe(_ request: SignInRequest) -> String {
        let from = request.requestedFrom.map(Formatting.printable) ?? "an unknown address"
        var lines = [
            "Sign-in request \(request.id)",
            "  application: \(Formatting.printable(request.clientName))",
            "  code:        \(Formatting.printable(request.bindingMessage))",
            "  from:        \(from)",
            "  made:        \(Formatting.printable(request.createdAt)), expires \(Formatting.printable(request.expiresAt))",
        ]
        if let scope = request.scope { lines.append("  scope:       \(Formatting.printable(scope))") }
        return lines.joined(separator: "\n")
    }

    /// Asks for the code until the user types the request's binding message (approve), `deny`,
    /// or, when `allowsSkip`, an empty line. A mistyped code approves and denies nothing.
    ///
    /// - Throws: `.cancelled` when input ends first.
    func askForCode(_ request: SignInRequest, allowsSkip: Bool) async throws(KeyAuthError) -> Choice {
        let expected = Self.normalized(request.bindingMessage)
        let prompt =
            "Type the code shown on the other screen to approve, or `deny`"
            + (allowsSkip ? " (an empty line leaves it): " : ": ")
        while true {
            let typed: String
            do {
                let line = try await BlockingThread.read(codeReader, prompt: prompt, echo: true)
                typed = line.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
            } catch {
                guard error.code == .cancelled else { throw error }
                throw KeyAuthError(.cancelled, "input ended before the code was typed; nothing was approved")
            }
            let answer = Self.normalized(typed)
            if answer == expected { return .approve }
            if answer == "deny" { return .deny }
            if answer.isEmpty, allowsSkip { return .skip }
            io.printError("That is not the code of this request; nothing was approved. Try again.")
        }
    }

    /// Trimmed and lowercased, so that case and stray spaces do not fail a correct code.
    private static func normalized(_ text: String) -> String {
        text.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// Checks presence, signs an approval of `request` with the device key, and sends it.
    ///
    /// - Throws: the presence check's errors (exit 77); ``closedRequest(_:)``'s for a request
    ///   that expired or was answered elsewhere (exit 1); the client's.
    func approve(_ request: SignInRequest) async throws(KeyAuthError) {
        let assertion = try await signApproval(of: request)
        let client = session.client
        do {
            try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.answerSignInRequest(
                    id: request.id, decision: .approve, assertion: assertion, accessToken: token, proofs: proofs)
            }
        } catch {
            throw Self.closedRequest(error)
        }
        io.printOutput(
            "Approved the sign-in to \(Formatting.printable(request.clientName)) "
                + "(code \(Formatting.printable(request.bindingMessage))).")
    }

    /// Denies the request `id`.
    func deny(id: String) async throws(KeyAuthError) {
        let client = session.client
        do {
            try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.answerSignInRequest(
                    id: id, decision: .deny, assertion: nil, accessToken: token, proofs: proofs)
            }
        } catch {
            throw Self.closedRequest(error)
        }
        io.printOutput("Denied sign-in request \(id).")
    }

    /// The device's statement of how it checked the user, in RFC 8176's values: the key is a
    /// file (`swk`), and the presence check a PIN (`pin`) or a PAM conversation (`user`).
    var authenticationMethods: [String] {
        var methods = [AuthenticationMethod.softwareKey.rawValue]
        switch session.account.presence {
        case .pin: methods.append(AuthenticationMethod.pin.rawValue)
        case .pam: methods.append(AuthenticationMethod.userPresence.rawValue)
        case .none: break
        }
        return methods
    }

    /// A device assertion carrying `auth_req_id` and `amr`, made by the same authenticator flow
    /// as a login (presence check, key unlocked, signed), whose session is the assertion itself.
    private func signApproval(of request: SignInRequest) async throws(KeyAuthError) -> String {
        var claims = JWTClaims()
        claims.set(AuthenticationMethod.requestClaim, string: request.id)
        claims.set("amr", strings: authenticationMethods)
        let payload = claims
        let hooks = AuthenticatorHooks<String>(
            registerPublicKey: { _, _ in
                throw KeyAuthError(.accountCorrupt, "the account has no device key to approve with")
            },
            jwtPayload: { payload }, authenticate: { assertion in assertion })
        let configuration = Authenticator<String>.Configuration(
            audience: session.account.issuer,
            reason: "Approve the sign-in to \(Formatting.printable(request.clientName)) as \(session.account.user)")
        let signer = Authenticator(
            store: session.keys, presence: session.authenticator.presence, configuration: configuration, hooks: hooks)
        return try await signer.login()
    }

    /// A server's refusal of an answer because the request is closed, as exit status 1 with a
    /// message that says which; other errors as they are.
    static func closedRequest(_ error: KeyAuthError) -> KeyAuthError {
        let reason: String
        switch error.oauthError?.error {
        case .expiredToken?: reason = "the sign-in request expired"
        case .alreadyAnswered?: reason = "the sign-in request was already answered on another device"
        case .notFound?: reason = "there is no such sign-in request for this user (or it was purged)"
        default: return error
        }
        return KeyAuthError(.signInRequestClosed, reason + "; nothing was changed", underlying: error.underlying)
    }
}

extension KeyAuthError.Code {
    /// A sign-in request that expired, was answered elsewhere, or does not exist; `keyauth`
    /// exits 1.
    public static let signInRequestClosed = KeyAuthError.Code(rawValue: "sign_in_request_closed")
}
