import KeyAuth

/// `keyauth approve [ID]` and `keyauth deny ID`: answer one sign-in request of this user.
struct AnswerCommand {
    let context: CommandContext
    let options: AnswerOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let approval = SignInApproval(session: session, pinFromStandardInput: options.pinFromStandardInput)
        if options.decision == .deny, let id = options.requestID {
            try await approval.deny(id: id)
            return
        }
        let request = try await chooseRequest(session, approval: approval)
        context.io.printError(SignInApproval.describe(request))
        _ = try await approval.answer(request, allowsSkip: false)
    }

    /// The request named by ID, or the only open one, or the one the user picks.
    ///
    /// - Throws: `.signInRequestClosed` when no open request has that id or none is open.
    private func chooseRequest(
        _ session: AccountSession, approval: SignInApproval
    ) async throws(KeyAuthError) -> SignInRequest {
        let client = session.client
        let list = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.signInRequests(accessToken: token, proofs: proofs)
        }
        if let id = options.requestID {
            guard let request = list.requests.first(where: { $0.id == id }) else {
                throw KeyAuthError(
                    .signInRequestClosed,
                    "no open sign-in request \(id) for \(session.account.user): it expired, was answered "
                        + "on another device, or never existed")
            }
            return request
        }
        switch list.requests.count {
        case 0:
            throw KeyAuthError(.signInRequestClosed, "no sign-in request is waiting for \(session.account.user)")
        case 1:
            return list.requests[0]
        default:
            return try await pick(from: list.requests, reader: approval.codeReader)
        }
    }

    /// Lists the requests numbered and reads the number of one.
    private func pick(from requests: [SignInRequest], reader: any SecretReader) async throws(KeyAuthError)
        -> SignInRequest
    {
        let io = context.io
        io.printError("Several sign-in requests are waiting:")
        for (index, request) in requests.enumerated() {
            io.printError(
                "  \(index + 1). \(Formatting.printable(request.clientName)), from "
                    + "\(request.requestedFrom.map(Formatting.printable) ?? "an unknown address"), made "
                    + Formatting.printable(request.createdAt))
        }
        while true {
            let typed: String
            do {
                let line = try await BlockingThread.read(
                    reader, prompt: "Which one (1-\(requests.count))? ", echo: true)
                typed = line.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
            } catch {
                guard error.code == .cancelled else { throw error }
                throw KeyAuthError(.cancelled, "input ended before a request was chosen; nothing was approved")
            }
            if let number = Int(typed.trimmingCharacters(in: .whitespaces)), requests.indices.contains(number - 1) {
                return requests[number - 1]
            }
            io.printError("Type a number from 1 to \(requests.count).")
        }
    }
}
