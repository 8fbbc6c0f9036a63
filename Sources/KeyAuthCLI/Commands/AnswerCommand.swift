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
            // Looked up among the open ones first, so that the answer can say what a denial did
            // (a recovery notice's revokes a device); a whole ID that no list shows still goes to
            // the server as it is, which knows requests the list leaves out.
            let list = try await openRequests(session)
            if InputRules.isValidSignInRequestID(id), !list.requests.contains(where: { $0.id == id }) {
                try await approval.deny(id: id, kind: nil)
            } else {
                let request = try matching(id, in: list, session)
                try await approval.deny(id: request.id, kind: request.kind)
            }
            return
        }
        let request = try await chooseRequest(session, approval: approval)
        context.io.printError(SignInApproval.describe(request))
        _ = try await approval.answer(request, allowsSkip: false)
    }

    /// The request named by ID (or its start), or the only open one, or the one the user picks.
    ///
    /// - Throws: `.signInRequestClosed` when no open request has that id or none is open;
    ///   ``request(_:in:user:command:)``'s usage error for a prefix of several.
    private func chooseRequest(
        _ session: AccountSession, approval: SignInApproval
    ) async throws(KeyAuthError) -> SignInRequest {
        let list = try await openRequests(session)
        if let id = options.requestID { return try matching(id, in: list, session) }
        switch list.requests.count {
        case 0:
            throw KeyAuthError(.signInRequestClosed, "no sign-in request is waiting for \(session.account.user)")
        case 1:
            return list.requests[0]
        default:
            return try await pick(from: list.requests, reader: approval.codeReader)
        }
    }

    /// The user's open sign-in requests.
    private func openRequests(_ session: AccountSession) async throws(KeyAuthError) -> SignInRequestList {
        let client = session.client
        return try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.signInRequests(accessToken: token, proofs: proofs)
        }
    }

    /// The one open request whose ID starts with `prefix`, for this command.
    private func matching(
        _ prefix: String, in list: SignInRequestList, _ session: AccountSession
    ) throws(KeyAuthError) -> SignInRequest {
        try Self.request(
            prefix, in: list.requests, user: session.account.user,
            command: options.decision == .deny ? .deny : .approve)
    }

    /// The one request in `requests` whose ID starts with `prefix` (a whole ID included), as
    /// device IDs are matched (``IDPrefix``).
    ///
    /// - Throws: `.signInRequestClosed` (exit 1, "nothing matched") when none does; `.usage`
    ///   (exit 64) when several do, listing them so the person can give more characters.
    static func request(
        _ prefix: String, in requests: [SignInRequest], user: String, command: CommandName
    ) throws(KeyAuthError) -> SignInRequest {
        switch IDPrefix.match(prefix, in: requests, id: \.id) {
        case .one(let request):
            return request
        case .none:
            throw KeyAuthError(
                .signInRequestClosed,
                "no open sign-in request \(prefix) for \(user): it expired, was answered on another device, "
                    + "or never existed (see `keyauth requests`)")
        case .several(let matches):
            let listed = matches.map { "\($0.id) (\(Formatting.printable($0.clientName)))" }
            throw CommandParser.usage(
                "\(prefix) starts \(matches.count) open sign-in requests: \(listed.joined(separator: ", ")); "
                    + "give more characters", command)
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
            // Compared before anything is subtracted: `number - 1` of Int.min would trap.
            if let number = Int(typed.trimmingCharacters(in: .whitespaces)), number > 0, number <= requests.count {
                return requests[number - 1]
            }
            io.printError("Type a number from 1 to \(requests.count).")
        }
    }
}
