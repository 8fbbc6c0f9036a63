import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The device's side of sign-in by approval (PROTOCOL.md section 8), shared by `keyauth approve`,
/// `keyauth deny` and `keyauth requests --watch`: show the request (never its code), have the user
/// type the code shown on the screen that started it, let the server check it, check presence,
/// sign an approval naming the request and carrying the code, and answer.
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

    /// The lines that describe a request: who asks, where from, when, until when. Never a code:
    /// the code is on the screen that started the sign-in, and the user types it here.
    static func describe(_ request: SignInRequest) -> String {
        let from = request.requestedFrom.map(Formatting.printable) ?? "an unknown address"
        let heading =
            switch request.kind {
            case .device: "Device approval request"
            case .recoveryCodes: "Recovery codes request"
            case .recovery: "Recovery notice"
            default: "Sign-in request"
            }
        var lines = [
            "\(heading) \(request.id)",
            "  application: \(Formatting.printable(request.clientName))",
            "  from:        \(from)",
            "  made:        \(Formatting.printable(request.createdAt)), expires \(Formatting.printable(request.expiresAt))",
        ]
        if let scope = request.scope { lines.append("  scope:       \(Formatting.printable(scope))") }
        return lines.joined(separator: "\n")
    }

    /// Asks for the code shown where the sign-in started until the server accepts it (then
    /// checks presence and approves), the user refuses (`deny`, `no`, ...: denied, never taken
    /// for a code), or, when `allowsSkip`, leaves it with an empty line. A wrong code is counted
    /// by the server; after its last attempt the request is denied.
    ///
    /// - Throws: `.cancelled` when input ends first; ``closedRequest(_:)``'s errors (exit 1),
    ///   also when the last wrong code denied the request; the presence check's and the client's.
    func answer(_ request: SignInRequest, allowsSkip: Bool) async throws(KeyAuthError) -> Choice {
        let prompt =
            (request.kind == .recovery
                ? "Type `deny` if this was not you (the device is revoked)"
                : "Type the code shown where you are signing in to approve, or `deny`")
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
            let answer = typed.trimmingCharacters(in: .whitespaces).lowercased()
            if answer.isEmpty || answer == "skip" {
                guard allowsSkip else { continue }
                return .skip
            }
            // Refusals first: no code can be one (the server refuses such binding messages).
            if InputRules.refusingAnswers.contains(answer) {
                try await deny(id: request.id, kind: request.kind)
                return .deny
            }
            // A notice has no code: nothing to approve.
            if request.kind == .recovery {
                io.printError("A recovery notice is only denied, or left to expire; nothing was approved.")
                continue
            }
            if try await codeMatches(typed, request) {
                try await approve(request, code: typed)
                return .approve
            }
        }
    }

    /// Whether the server takes `typed` as the request's code; a wrong one is reported with the
    /// attempts left.
    ///
    /// - Throws: ``closedRequest(_:)``'s errors, also when that was the last attempt.
    private func codeMatches(_ typed: String, _ request: SignInRequest) async throws(KeyAuthError) -> Bool {
        let client = session.client
        do {
            try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.checkSignInCode(id: request.id, code: typed, accessToken: token, proofs: proofs)
            }
            return true
        } catch {
            switch error.oauthError?.error {
            case .wrongCode?:
                let detail = error.oauthError?.errorDescription ?? "that is not the code"
                io.printError("\(detail); nothing was approved.")
                return false
            case .accessDenied? where error.oauthError?.statusCode == 403:
                // Not a denial: the request asks for a stronger device (acr_values) than this
                // one, says which, and stays open for another device of the user.
                throw error
            case .accessDenied?:
                throw KeyAuthError(
                    .signInRequestClosed,
                    "that was the last attempt: the sign-in request is denied; nothing was approved",
                    underlying: error.underlying)
            default:
                throw Self.closedRequest(error)
            }
        }
    }

    /// Checks presence, signs an approval of `request` with the code the user typed, and sends
    /// it.
    ///
    /// - Throws: the presence check's errors (exit 77); ``closedRequest(_:)``'s for a request
    ///   that expired or was answered elsewhere (exit 1); the client's.
    func approve(_ request: SignInRequest, code: String) async throws(KeyAuthError) {
        var claims = JWTClaims()
        claims.set(AuthenticationMethod.requestClaim, string: request.id)
        claims.set(AuthenticationMethod.codeClaim, string: code)
        let what =
            switch request.kind {
            case .device: "Approve a new device"
            case .recoveryCodes: "Approve new recovery codes"
            default: "Approve the sign-in to \(Formatting.printable(request.clientName))"
            }
        let assertion = try await ApprovalSigner(session: session).sign(
            claims, reason: "\(what) as \(session.account.user)", requiringPresence: request.kind.needsPresence)
        let client = session.client
        do {
            _ = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.answerSignInRequest(
                    id: request.id, decision: .approve, assertion: assertion, accessToken: token, proofs: proofs)
            }
        } catch {
            throw Self.closedRequest(error)
        }
        io.printOutput(
            request.kind.needsPresence
                ? "Approved: \(Formatting.printable(request.clientName))."
                : "Approved the sign-in to \(Formatting.printable(request.clientName)).")
    }

    /// Denies the request `id`, and says what that did: a recovery notice's denial revokes the
    /// device the recovery code enrolled, which the person should not have to infer.
    ///
    /// - Parameter kind: the request's kind when it is known (nil for an ID no list showed).
    func deny(id: String, kind: SignInRequest.Kind?) async throws(KeyAuthError) {
        let client = session.client
        do {
            _ = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.answerSignInRequest(
                    id: id, decision: .deny, assertion: nil, accessToken: token, proofs: proofs)
            }
        } catch {
            throw Self.closedRequest(error)
        }
        io.printOutput(
            kind == .recovery
                ? "Denied recovery notice \(id): the device the recovery code enrolled is revoked and can no longer "
                    + "log in."
                : "Denied sign-in request \(id).")
    }

    /// A server's refusal of an answer because the request is closed, as exit status 1 with a
    /// message that says which; other errors as they are. An expiry the server explains
    /// otherwise (an account page request whose page was signed out) keeps its explanation,
    /// since the request may still be listed with time left.
    static func closedRequest(_ error: KeyAuthError) -> KeyAuthError {
        let reason: String
        switch error.oauthError?.error {
        case .expiredToken?:
            // keyauth-server says "the sign-in request expired" for a plain expiry.
            reason = error.oauthError?.errorDescription.map(Formatting.printable) ?? "the sign-in request expired"
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
    package static let signInRequestClosed = KeyAuthError.Code(rawValue: "sign_in_request_closed")
}
